// gazette-peer is this project's Go test peer: it uses Gazette's own packages (a module
// dependency, see go.mod) as the oracle for what the Python connector must agree with.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: gazette-peer <subcommand> [flags]")
		os.Exit(2)
	}
	fmt.Fprintf(os.Stderr, "gazette-peer: unknown subcommand %q\n", os.Args[1])
	os.Exit(2)
}
