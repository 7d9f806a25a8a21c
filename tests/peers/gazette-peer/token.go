package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/metadata"

	"go.gazette.dev/core/auth"
	pb "go.gazette.dev/core/broker/protocol"
)

var capabilities = map[string]pb.Capability{
	"LIST":      pb.Capability_LIST,
	"APPLY":     pb.Capability_APPLY,
	"READ":      pb.Capability_READ,
	"APPEND":    pb.Capability_APPEND,
	"REPLICATE": pb.Capability_REPLICATE,
	"ALL":       pb.Capability_ALL,
}

// runToken prints a bearer token signed by Gazette's auth.KeyedAuth, as a broker started with
// the same --broker.auth-keys would mint and verify it.
func runToken(args []string) error {
	var fs = flag.NewFlagSet("token", flag.ContinueOnError)
	var keys = fs.String("keys", "", "base64 keys, as --broker.auth-keys (the first one signs)")
	var caps = fs.String("capability", "LIST,READ,APPEND", "comma-separated capabilities")
	var selector = fs.String("selector", "", "label selector the claims are limited to")
	var expires = fs.Duration("expires", time.Hour, "validity of the token")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var ka, err = auth.NewKeyedAuth(*keys)
	if err != nil {
		return err
	}
	var claims pb.Claims
	for _, c := range splitList(*caps) {
		var v, ok = capabilities[strings.ToUpper(c)]
		if !ok {
			return fmt.Errorf("unknown capability %q", c)
		}
		claims.Capability |= v
	}
	if claims.Selector, err = pb.ParseLabelSelector(*selector); err != nil {
		return fmt.Errorf("--selector: %w", err)
	}
	ctx, err := ka.Authorize(context.Background(), claims, *expires)
	if err != nil {
		return err
	}
	var md, _ = metadata.FromOutgoingContext(ctx)
	var values = md.Get("authorization")
	if len(values) != 1 || !strings.HasPrefix(values[0], "Bearer ") {
		return fmt.Errorf("auth.KeyedAuth did not produce a bearer authorization: %v", values)
	}
	fmt.Println(strings.TrimPrefix(values[0], "Bearer "))
	return nil
}
