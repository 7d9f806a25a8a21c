package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"go.gazette.dev/core/broker/client"
	pb "go.gazette.dev/core/broker/protocol"
	"go.gazette.dev/core/message"
)

// oracleLine is one committed message as Gazette's ReadCommittedIter returns it.
type oracleLine struct {
	Journal  string          `json:"journal"`
	Offset   int64           `json:"offset"`
	End      int64           `json:"end"`
	UUID     string          `json:"uuid"`
	Flags    int             `json:"flags"`
	Producer int             `json:"producer"`
	Seq      int             `json:"seq"`
	Kind     string          `json:"kind"`
	Body     string          `json:"body"`
	Doc      json.RawMessage `json:"doc,omitempty"`     // JSON framing: the document as read.
	Payload  string          `json:"payload,omitempty"` // Fixed framing: base64 of the payload.
}

func runReadCommitted(args []string) error {
	var fs = flag.NewFlagSet("read-committed", flag.ContinueOnError)
	var broker = fs.String("broker", "", "broker address, http://host:port")
	var journals = fs.String("journals", "", "comma-separated journals to read")
	var buffer = fs.Int("buffer", 16, "sequencer ring size (small values exercise replays)")
	var token = fs.String("token", "", "bearer token")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *broker == "" || *journals == "" {
		return fmt.Errorf("--broker and --journals are required")
	}
	var ctx = context.Background()
	var rjc, closeFn, err = dialBroker(ctx, *broker, *token)
	if err != nil {
		return err
	}
	defer closeFn()

	var out = json.NewEncoder(os.Stdout)
	for _, journal := range splitList(*journals) {
		// Non-blocking: the read ends with OFFSET_NOT_YET_AVAILABLE at the write head.
		var rr = client.NewRetryReader(ctx, rjc, pb.ReadRequest{Journal: pb.Journal(journal)})
		var it = message.NewReadCommittedIter(rr, func(*pb.JournalSpec) (message.Message, error) {
			return new(peerMsg), nil
		}, message.NewSequencer(nil, nil, *buffer))

		for {
			var env, err = it.Next()
			if errors.Is(err, io.EOF) || errors.Is(err, client.ErrOffsetNotYetAvailable) {
				break
			} else if err != nil {
				return fmt.Errorf("journal %s: %w", journal, err)
			}
			var m = env.Message.(*peerMsg)
			var line = oracleLine{
				Journal:  journal,
				Offset:   env.Begin,
				End:      env.End,
				UUID:     m.UUID.String(),
				Flags:    int(message.GetFlags(m.UUID)),
				Producer: m.Producer,
				Seq:      m.Seq,
				Kind:     m.Kind,
				Body:     m.Body,
			}
			if len(m.raw) > 0 && m.raw[0] == '{' {
				line.Doc = m.raw
			} else {
				line.Payload = base64.StdEncoding.EncodeToString(m.raw)
			}
			if err = out.Encode(line); err != nil {
				return err
			}
		}
	}
	return nil
}
