package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand"

	"go.gazette.dev/core/broker/client"
	pb "go.gazette.dev/core/broker/protocol"
	"go.gazette.dev/core/message"
)

// publisher is one producer of the run: a message.Publisher and what it has published.
type publisher struct {
	n       int
	pub     *message.Publisher
	lastAck []message.AckIntent // ACK intents of its last committed transaction (replayed on "restart").
	open    int                 // Uncommitted messages of its open transaction.
}

type publishRun struct {
	ajc      *client.AppendService
	framing  message.Framing
	ct       string
	journals []pb.Journal
	rng      *rand.Rand
	seq      int
}

func (r *publishRun) mapping(m message.Mappable) (pb.Journal, string, error) {
	return m.(*peerMsg).journal, r.ct, nil
}

func (r *publishRun) newMsg(p *publisher, kind string) *peerMsg {
	r.seq++
	return &peerMsg{
		Producer: p.n,
		Seq:      r.seq,
		Kind:     kind,
		Body:     fmt.Sprintf("p%d-m%d", p.n, r.seq),
		journal:  r.journals[r.rng.Intn(len(r.journals))],
	}
}

// appendRaw appends already-framed bytes to a journal, ordered after the publisher's appends.
func (r *publishRun) appendRaw(journal pb.Journal, b []byte) error {
	var aa = r.ajc.StartAppend(pb.AppendRequest{Journal: journal}, nil)
	_, _ = aa.Writer().Write(b)
	return aa.Release()
}

// frame marshals a published message (its UUID already set) again, to append a duplicate.
func (r *publishRun) frame(m *peerMsg) []byte {
	var buf bytes.Buffer
	var bw = bufio.NewWriter(&buf)
	if err := r.framing.Marshal(m, bw); err != nil {
		panic(err)
	}
	_ = bw.Flush()
	return buf.Bytes()
}

func (r *publishRun) commit(p *publisher) error {
	var intents, err = p.pub.BuildAckIntents()
	if err != nil {
		return err
	}
	for _, i := range intents {
		if err = r.appendRaw(i.Journal, i.Intent); err != nil {
			return err
		}
	}
	// Intents reference one buffer which the next BuildAckIntents does not reuse; keep copies.
	p.lastAck = p.lastAck[:0]
	for _, i := range intents {
		p.lastAck = append(p.lastAck, message.AckIntent{Journal: i.Journal, Intent: append([]byte(nil), i.Intent...)})
	}
	p.open = 0
	return nil
}

func runPublish(args []string) error {
	var fs = flag.NewFlagSet("publish", flag.ContinueOnError)
	var broker = fs.String("broker", "", "broker address, http://host:port")
	var journals = fs.String("journals", "", "comma-separated journals to publish to")
	var framing = fs.String("framing", "ndjson", "ndjson or protobuf-fixed (must match the journals' content-type)")
	var producers = fs.Int("producers", 4, "number of producers")
	var rounds = fs.Int("rounds", 40, "publishing rounds")
	var seed = fs.Int64("seed", 1, "random seed (the run is a function of it)")
	var token = fs.String("token", "", "bearer token")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *broker == "" || *journals == "" {
		return fmt.Errorf("--broker and --journals are required")
	}
	var ct, err = contentTypeOf(*framing)
	if err != nil {
		return err
	}
	var ctx = context.Background()
	rjc, closeFn, err := dialBroker(ctx, *broker, *token)
	if err != nil {
		return err
	}
	defer closeFn()

	var run = &publishRun{ajc: client.NewAppendService(ctx, rjc), ct: ct, rng: rand.New(rand.NewSource(*seed))}
	if run.framing, err = message.FramingByContentType(ct); err != nil {
		return err
	}
	for _, j := range splitList(*journals) {
		run.journals = append(run.journals, pb.Journal(j))
	}

	var pubs []*publisher
	for n := 0; n < *producers; n++ {
		pubs = append(pubs, &publisher{n: n, pub: message.NewPublisher(run.ajc, nil)})
	}
	// Producer 0 holds one transaction open for the whole run: its ACK arrives much later
	// than its messages, after everything the others publish.
	var late = pubs[0]
	for i := 0; i < 3; i++ {
		if _, err = late.pub.PublishUncommitted(run.mapping, run.newMsg(late, "late-txn")); err != nil {
			return err
		}
	}

	for round := 0; round < *rounds; round++ {
		var p = pubs[1+run.rng.Intn(len(pubs)-1)]
		switch action := run.rng.Intn(8); {
		case action < 2: // A committed message, in or outside a transaction.
			if _, err = p.pub.PublishCommitted(run.mapping, run.newMsg(p, "committed")); err != nil {
				return err
			}
		case action < 4: // Add to the open transaction.
			if _, err = p.pub.PublishUncommitted(run.mapping, run.newMsg(p, "txn")); err != nil {
				return err
			}
			p.open++
		case action == 4: // Commit the open transaction.
			if err = run.commit(p); err != nil {
				return err
			}
		case action == 5: // A committed message appended twice.
			var m = run.newMsg(p, "committed-dup")
			if _, err = p.pub.PublishCommitted(run.mapping, m); err != nil {
				return err
			}
			if err = run.appendRaw(m.journal, run.frame(m)); err != nil {
				return err
			}
		case action == 6: // Restart: the open transaction is abandoned and the last ACKs
			// are written again (older clock), which rolls it back.
			if p.open == 0 || len(p.lastAck) == 0 {
				continue
			}
			for _, i := range p.lastAck {
				if err = run.appendRaw(i.Journal, i.Intent); err != nil {
					return err
				}
			}
			_, _ = p.pub.BuildAckIntents() // Forget the abandoned transaction's journals.
			p.open = 0
		case action == 7: // Commit, then the whole ACK written again (a duplicate ACK).
			if err = run.commit(p); err != nil {
				return err
			}
			for _, i := range p.lastAck {
				if err = run.appendRaw(i.Journal, i.Intent); err != nil {
					return err
				}
			}
		}
		if round%7 == 3 {
			if _, err = late.pub.PublishUncommitted(run.mapping, run.newMsg(late, "late-txn")); err != nil {
				return err
			}
		}
	}
	// Commit the late transaction and some of the others; the rest stay open (never committed).
	if err = run.commit(late); err != nil {
		return err
	}
	for _, p := range pubs[1:] {
		if p.n%2 == 1 {
			if err = run.commit(p); err != nil {
				return err
			}
		}
	}
	for op := range run.ajc.PendingExcept("") {
		if err = op.Err(); err != nil {
			return err
		}
	}
	return nil
}
