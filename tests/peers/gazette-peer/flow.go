package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"strings"
	"time"

	"go.gazette.dev/core/broker/client"
	pb "go.gazette.dev/core/broker/protocol"
	"go.gazette.dev/core/labels"
	"go.gazette.dev/core/message"
)

// flowControl is Flow's CONTROL UUID flag (bit 2): a control document, always outside
// transactions (see docs/flow.md).
const flowControl message.Flags = 0x4

// flowDoc is a Flow-shaped collection document: its UUID and change operation under _meta, a
// key, the logical partition field "region" (taken from the journal name, as Flow routes it)
// and a value.
type flowDoc struct {
	UUID    message.UUID
	Op      string
	ID      int
	Region  string
	N       int
	Ack     bool
	journal pb.Journal
}

func (d *flowDoc) GetUUID() message.UUID  { return d.UUID }
func (d *flowDoc) SetUUID(u message.UUID) { d.UUID = u }
func (d *flowDoc) NewAcknowledgement(j pb.Journal) message.Message {
	return &flowDoc{Ack: true, journal: j}
}

func (d *flowDoc) MarshalJSON() ([]byte, error) {
	if d.Ack { // Flow's ACK documents hold only _meta.
		return json.Marshal(map[string]any{"_meta": map[string]any{"uuid": d.UUID.String(), "ack": true}})
	}
	return json.Marshal(map[string]any{
		"_meta":  map[string]any{"uuid": d.UUID.String(), "op": d.Op},
		"id":     d.ID,
		"region": d.Region,
		"n":      d.N,
	})
}

func (d *flowDoc) UnmarshalJSON(b []byte) error { return fmt.Errorf("flowDoc is write-only") }

// regionOf is the value of a journal name's region=<value> segment.
func regionOf(j pb.Journal) string {
	for _, seg := range strings.Split(j.String(), "/") {
		if v, ok := strings.CutPrefix(seg, "region="); ok {
			return v
		}
	}
	return ""
}

// runFlowPublish publishes Flow-style documents with message.Publisher: committed documents,
// transactions over several journals committed by ACKs, a transaction never committed, and CONTROL documents (backfillBegin / backfillComplete)
// appended to every journal with UUIDs built by Gazette's BuildUUID.
func runFlowPublish(args []string) error {
	var fs = flag.NewFlagSet("flow-publish", flag.ContinueOnError)
	var broker = fs.String("broker", "", "broker address, http://host:port")
	var journals = fs.String("journals", "", "comma-separated Flow journal names (with region=<v> segments)")
	var rounds = fs.Int("rounds", 40, "publishing rounds")
	var keys = fs.Int("keys", 12, "distinct document keys")
	var seed = fs.Int64("seed", 1, "random seed")
	var control = fs.Bool("control", true, "publish backfillBegin/backfillComplete control documents")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *broker == "" || *journals == "" {
		return fmt.Errorf("--broker and --journals are required")
	}
	var ctx = context.Background()
	rjc, closeFn, err := dialBroker(ctx, *broker, "")
	if err != nil {
		return err
	}
	defer closeFn()
	var ajc = client.NewAppendService(ctx, rjc)
	var rng = rand.New(rand.NewSource(*seed))
	var js []pb.Journal
	for _, j := range splitList(*journals) {
		js = append(js, pb.Journal(j))
	}
	var mapping = func(m message.Mappable) (pb.Journal, string, error) {
		return m.(*flowDoc).journal, labels.ContentType_JSONLines, nil
	}
	var appendRaw = func(j pb.Journal, b []byte) error {
		var aa = ajc.StartAppend(pb.AppendRequest{Journal: j}, nil)
		_, _ = aa.Writer().Write(b)
		return aa.Release()
	}
	var commit = func(p *message.Publisher) error {
		var intents, err = p.BuildAckIntents()
		if err != nil {
			return err
		}
		for _, i := range intents {
			if err = appendRaw(i.Journal, i.Intent); err != nil {
				return err
			}
		}
		return nil
	}
	var seq = 0
	var newDoc = func() *flowDoc {
		seq++
		var j = js[rng.Intn(len(js))]
		var op = []string{"c", "u", "u", "d"}[rng.Intn(4)]
		return &flowDoc{Op: op, ID: rng.Intn(*keys), Region: regionOf(j), N: seq, journal: j}
	}
	// The capture runtime's producer of control documents: its own producer ID and clock.
	var ctlProducer = message.NewProducerID()
	var ctlClock = message.NewClock(time.Now())
	var publishControl = func(body map[string]any) error {
		for _, j := range js {
			ctlClock.Tick()
			body["uuid"] = message.BuildUUID(ctlProducer, ctlClock, flowControl).String()
			var b, err = json.Marshal(map[string]any{"_meta": body})
			if err != nil {
				return err
			}
			if err = appendRaw(j, append(b, '\n')); err != nil {
				return err
			}
		}
		return nil
	}

	var txn = message.NewPublisher(ajc, nil)     // Transactions, each committed by ACKs.
	var outside = message.NewPublisher(ajc, nil) // Documents committed on their own.
	var doomed = message.NewPublisher(ajc, nil)  // A transaction never committed.
	if *control {
		if err = publishControl(map[string]any{"backfillBegin": true, "keyBegin": "00000000", "keyEnd": "ffffffff"}); err != nil {
			return err
		}
	}
	for i := 0; i < 2; i++ {
		if _, err = doomed.PublishUncommitted(mapping, newDoc()); err != nil {
			return err
		}
	}
	for round := 0; round < *rounds; round++ {
		switch action := rng.Intn(4); {
		case action == 0:
			if _, err = outside.PublishCommitted(mapping, newDoc()); err != nil {
				return err
			}
		case action < 3:
			if _, err = txn.PublishUncommitted(mapping, newDoc()); err != nil {
				return err
			}
		default:
			if err = commit(txn); err != nil {
				return err
			}
		}
		if round == *rounds/2 { // The doomed producer's transaction grows; it is never committed.
			if _, err = doomed.PublishUncommitted(mapping, newDoc()); err != nil {
				return err
			}
		}
	}
	if err = commit(txn); err != nil {
		return err
	}
	if *control {
		if err = publishControl(map[string]any{
			"backfillComplete": true, "truncatedAt": time.Now().UTC().Format(time.RFC3339),
			"keyBegin": "00000000", "keyEnd": "ffffffff",
		}); err != nil {
			return err
		}
	}
	for op := range ajc.PendingExcept("") {
		if err = op.Err(); err != nil {
			return err
		}
	}
	return nil
}
