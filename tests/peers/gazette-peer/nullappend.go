package main

// null-append: a do-nothing Journal server for write benchmarks (bench/bench_write.py, sink
// "null-go"), the Go twin of bench/null_append_server.py. It answers List (every name the
// selector asks for is one ndjson journal, this server its only member and primary) and Append
// (reads the request stream, keeps a write head per journal, answers OK with the commit's
// offsets and no sum, stores nothing, syncs nothing); every other RPC is UNIMPLEMENTED. Its cost
// is what Go's gRPC costs to receive the appends, which is what a Gazette broker on the same
// cores pays before it does any of its own work.

import (
	"flag"
	"fmt"
	"io"
	"net"
	"sync"

	pb "go.gazette.dev/core/broker/protocol"
	"google.golang.org/grpc"
)

type nullJournals struct {
	pb.UnimplementedJournalServer
	endpoint pb.Endpoint
	mu       sync.Mutex
	heads    map[pb.Journal]int64
}

func (s *nullJournals) header() pb.Header {
	var id = pb.ProcessSpec_ID{Zone: "local", Suffix: "null-append"}
	return pb.Header{
		ProcessId: id,
		Route:     pb.Route{Members: []pb.ProcessSpec_ID{id}, Primary: 0, Endpoints: []pb.Endpoint{s.endpoint}},
		Etcd:      pb.Header_Etcd{ClusterId: 1, MemberId: 1, Revision: 1, RaftTerm: 1},
	}
}

func (s *nullJournals) List(req *pb.ListRequest, srv pb.Journal_ListServer) error {
	var hdr = s.header()
	var resp = pb.ListResponse{Status: pb.Status_OK, Header: hdr}
	for _, label := range req.Selector.Include.Labels {
		if label.Name != "name" || label.Value == "" {
			continue
		}
		resp.Journals = append(resp.Journals, pb.ListResponse_Journal{
			Spec: pb.JournalSpec{
				Name:        pb.Journal(label.Value),
				Replication: 1,
				LabelSet:    pb.MustLabelSet("content-type", "application/x-ndjson"),
				Fragment: pb.JournalSpec_Fragment{
					Length:           1 << 30,
					CompressionCodec: pb.CompressionCodec_NONE,
				},
			},
			ModRevision:    1,
			CreateRevision: 1,
			Route:          hdr.Route,
		})
	}
	return srv.Send(&resp)
}

func (s *nullJournals) Append(srv pb.Journal_AppendServer) error {
	var first, err = srv.Recv()
	if err != nil {
		return err
	}
	var size int64
	for {
		var req, err = srv.Recv()
		if err == io.EOF {
			break
		} else if err != nil {
			return err
		}
		size += int64(len(req.Content))
	}
	s.mu.Lock()
	var begin = s.heads[first.Journal]
	s.heads[first.Journal] = begin + size
	s.mu.Unlock()
	return srv.SendAndClose(&pb.AppendResponse{
		Status: pb.Status_OK,
		Header: s.header(),
		Commit: &pb.Fragment{Journal: first.Journal, Begin: begin, End: begin + size},
	})
}

func runNullAppend(args []string) error {
	var fs = flag.NewFlagSet("null-append", flag.ExitOnError)
	var port = fs.Int("port", 0, "port to listen on (0: any free port)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var ln, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", *port))
	if err != nil {
		return err
	}
	var endpoint = pb.Endpoint(fmt.Sprintf("http://%s", ln.Addr().String()))
	var server = grpc.NewServer(grpc.MaxRecvMsgSize(1 << 26))
	pb.RegisterJournalServer(server, &nullJournals{endpoint: endpoint, heads: make(map[pb.Journal]int64)})
	fmt.Printf("listening on %s\n", endpoint)
	return server.Serve(ln)
}
