package main

import (
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protowire"

	pb "go.gazette.dev/core/broker/protocol"
	"go.gazette.dev/core/labels"
	"go.gazette.dev/core/message"
)

// peerMsg is the message the peer publishes: a producer number, a sequence number, a kind
// (what the publisher did with it) and a body. Its journal is chosen before publishing and is
// not part of the serialized message.
type peerMsg struct {
	UUID     message.UUID
	Producer int
	Seq      int
	Kind     string
	Body     string
	Ack      bool

	raw     []byte     // The exact document read (JSON framing), for the oracle's output.
	journal pb.Journal // Where the mapping sends it.
}

func (m *peerMsg) GetUUID() message.UUID  { return m.UUID }
func (m *peerMsg) SetUUID(u message.UUID) { m.UUID = u }
func (m *peerMsg) NewAcknowledgement(j pb.Journal) message.Message {
	return &peerMsg{Kind: "ack", Ack: true, journal: j}
}

// JSON framing: the UUID lives at /_meta/uuid, as Gazette consumers and Estuary Flow put it.

type jsonMeta struct {
	UUID string `json:"uuid"`
}

type jsonWire struct {
	Meta     *jsonMeta `json:"_meta,omitempty"`
	Producer int       `json:"producer"`
	Seq      int       `json:"seq"`
	Kind     string    `json:"kind"`
	Body     string    `json:"body,omitempty"`
	Ack      bool      `json:"ack,omitempty"`
}

func (m *peerMsg) MarshalJSON() ([]byte, error) {
	return json.Marshal(jsonWire{&jsonMeta{m.UUID.String()}, m.Producer, m.Seq, m.Kind, m.Body, m.Ack})
}

// UnmarshalJSON accepts any JSON object (our Spark writer's rows too), keeping its raw bytes and
// reading the UUID at /_meta/uuid if there is one.
func (m *peerMsg) UnmarshalJSON(b []byte) error {
	m.raw = append([]byte(nil), b...)
	var doc struct {
		Meta *jsonMeta `json:"_meta"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return err
	}
	var w jsonWire
	_ = json.Unmarshal(b, &w) // Best effort: foreign documents need not have these fields.
	m.Producer, m.Seq, m.Kind, m.Body, m.Ack = w.Producer, w.Seq, w.Kind, w.Body, w.Ack
	if doc.Meta != nil && doc.Meta.UUID != "" {
		var u, err = uuid.Parse(doc.Meta.UUID)
		if err != nil {
			return fmt.Errorf("parsing /_meta/uuid: %w", err)
		}
		m.UUID = u
	}
	return nil
}

// Protobuf (fixed framing): field 1 the UUID's 16 raw bytes, 2 producer, 3 seq, 4 kind,
// 5 body, 6 ack.

func (m *peerMsg) protoBytes() []byte {
	var b []byte
	if m.UUID != (message.UUID{}) {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, m.UUID[:])
	}
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(m.Producer))
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(m.Seq))
	b = protowire.AppendTag(b, 4, protowire.BytesType)
	b = protowire.AppendString(b, m.Kind)
	if m.Body != "" {
		b = protowire.AppendTag(b, 5, protowire.BytesType)
		b = protowire.AppendString(b, m.Body)
	}
	if m.Ack {
		b = protowire.AppendTag(b, 6, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	return b
}

func (m *peerMsg) ProtoSize() int { return len(m.protoBytes()) }

func (m *peerMsg) MarshalTo(b []byte) (int, error) { return copy(b, m.protoBytes()), nil }

func (m *peerMsg) Unmarshal(b []byte) error {
	m.raw = append([]byte(nil), b...)
	for len(b) > 0 {
		var num, typ, n = protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case typ == protowire.BytesType:
			var v, n = protowire.ConsumeBytes(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			switch num {
			case 1:
				if len(v) != 16 {
					return fmt.Errorf("field 1 (uuid) has %d bytes, not 16", len(v))
				}
				copy(m.UUID[:], v)
			case 4:
				m.Kind = string(v)
			case 5:
				m.Body = string(v)
			}
			b = b[n:]
		case typ == protowire.VarintType:
			var v, n = protowire.ConsumeVarint(b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			switch num {
			case 2:
				m.Producer = int(v)
			case 3:
				m.Seq = int(v)
			case 6:
				m.Ack = v != 0
			}
			b = b[n:]
		default:
			var n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			b = b[n:]
		}
	}
	return nil
}

func contentTypeOf(framing string) (string, error) {
	switch framing {
	case "ndjson":
		return labels.ContentType_JSONLines, nil
	case "protobuf-fixed":
		return labels.ContentType_ProtoFixed, nil
	}
	return "", fmt.Errorf("--framing must be ndjson or protobuf-fixed, not %q", framing)
}
