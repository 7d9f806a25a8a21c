// gazette-peer is this project's Go test peer: it uses Gazette's own packages (a module
// dependency, see go.mod) as the oracle for what the Python connector must agree with.
//
// Subcommands:
//
//	publish         publish messages with message.Publisher: committed messages, transactions,
//	                rolled-back transactions, duplicates, late ACKs, several journals
//	read-committed  read journals with Gazette's ReadCommittedIter and print each committed
//	                message as a JSON line (the oracle)
//	token           mint a bearer token with Gazette's auth package
//	flow-publish    publish Estuary Flow-shaped collection documents (UUIDs at /_meta/uuid,
//	                ACKs, CONTROL-flag documents) into Flow-named journals
//	null-append     serve a do-nothing Journal server (List and Append) for write benchmarks
package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.gazette.dev/core/auth"
	pb "go.gazette.dev/core/broker/protocol"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: gazette-peer publish|read-committed|token|flow-publish|null-append [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "publish":
		err = runPublish(os.Args[2:])
	case "read-committed":
		err = runReadCommitted(os.Args[2:])
	case "token":
		err = runToken(os.Args[2:])
	case "flow-publish":
		err = runFlowPublish(os.Args[2:])
	case "null-append":
		err = runNullAppend(os.Args[2:])
	default:
		fmt.Fprintf(os.Stderr, "gazette-peer: unknown subcommand %q\n", os.Args[1])
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "gazette-peer %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// dialBroker connects to a broker address ("http://host:port" or "host:port") and returns a
// routed journal client, authorizing every request with the bearer token if one is given.
func dialBroker(ctx context.Context, address, token string) (pb.RoutedJournalClient, func(), error) {
	var target = strings.TrimPrefix(strings.TrimPrefix(address, "http://"), "https://")
	var conn, err = grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, fmt.Errorf("dialing %s: %w", address, err)
	}
	var jc = pb.NewJournalClient(conn)
	if token != "" {
		jc = pb.NewAuthJournalClient(jc, auth.NewBearerAuth(token))
	}
	return pb.NewRoutedJournalClient(jc, pb.NoopDispatchRouter{}), func() { _ = conn.Close() }, nil
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}
