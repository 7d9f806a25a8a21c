// etcd runs the etcd server of go.etcd.io/etcd/server/v3 at the version pinned in go.mod.
//
// Gazette v0.103.0's etcd client (go.etcd.io/etcd/client/v3 v3.6) refuses servers older than
// etcd 3.5 ("etcdclient: old cluster version"), and Debian bookworm's etcd-server is 3.4, so the
// test cluster's etcd is built from the Go module proxy instead. This file is only an entry point.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
