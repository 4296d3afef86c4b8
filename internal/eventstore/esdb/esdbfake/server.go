// Package esdbfake is a FAKE of EventStoreDB: an in-memory gRPC server that
// speaks the subset of EventStoreDB's client protocol used by
// EventStore-Client-Go v4 for appends, reads and catch-up subscriptions. It
// is built on the generated server interfaces of the client module's protos
// packages, so the real client and the esdb adapter talk to it over a real
// TCP connection.
//
// It exists so that the esdb adapter runs the event store contract suite in
// plain `go test`. It is not a database, has no persistence, no security, no
// projections and no cluster, and must never be used outside tests. See the
// README beside the esdb package for what it covers and what it does not.
package esdbfake

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/protos/gossip"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/serverfeatures"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// Version is the server version the fake reports through ServerFeatures.
const Version = "24.10.0"

// Server is a fake EventStoreDB node listening on 127.0.0.1. It is safe for
// concurrent use.
type Server struct {
	addr string // host:port, fixed for the server's life (kept across Restart)

	mu      sync.Mutex
	log     []*record            // the global log, in position order
	streams map[string][]*record // each stream's events, in revision order
	wake    chan struct{}        // closed and replaced by every append
	drop    chan struct{}        // closed and replaced by DropSubscriptions
	subs    uint64               // subscriptions started, for ids

	srvMu   sync.Mutex
	grpcSrv *grpc.Server // nil while stopped
	closed  bool
}

// record is one stored event.
type record struct {
	id             uuid.UUID
	stream         string
	revision       uint64
	position       uint64 // commit and prepare position alike
	metadata       map[string]string
	customMetadata []byte
	data           []byte
}

// Start starts a fake server on a free port of 127.0.0.1.
func Start() (*Server, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("esdbfake: listen: %w", err)
	}
	s := &Server{
		addr:    lis.Addr().String(),
		streams: map[string][]*record{},
		wake:    make(chan struct{}),
		drop:    make(chan struct{}),
	}
	s.serve(lis)
	return s, nil
}

// Addr is the host:port the server listens on.
func (s *Server) Addr() string { return s.addr }

// ConnectionString is an esdb:// connection string for the server (without
// TLS, which the fake does not speak).
func (s *Server) ConnectionString() string {
	return "esdb://" + s.addr + "?tls=false"
}

func (s *Server) serve(lis net.Listener) {
	g := grpc.NewServer(
		// The client pings every 10 s even without calls; the gRPC default
		// policy would answer that with GOAWAY "too many pings".
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
		grpc.MaxRecvMsgSize(17*1024*1024),
	)
	streams.RegisterStreamsServer(g, &streamsService{s: s})
	serverfeatures.RegisterServerFeaturesServer(g, &featuresService{})
	gossip.RegisterGossipServer(g, &gossipService{s: s})
	s.srvMu.Lock()
	s.grpcSrv = g
	s.srvMu.Unlock()
	go g.Serve(lis) // returns when the server stops
}

// Stop stops serving at once: every connection and call is dropped, as when
// the node crashes. The stored events are kept; Restart serves them again
// on the same address.
func (s *Server) Stop() {
	s.srvMu.Lock()
	g := s.grpcSrv
	s.grpcSrv = nil
	s.srvMu.Unlock()
	if g != nil {
		g.Stop()
	}
}

// Restart stops the server if it is running and serves again on the same
// address with the same events, as a node that restarts.
func (s *Server) Restart() error {
	s.Stop()
	s.srvMu.Lock()
	closed := s.closed
	s.srvMu.Unlock()
	if closed {
		return errors.New("esdbfake: restart after Close")
	}
	var lis net.Listener
	var err error
	for i := 0; i < 50; i++ { // the old socket may take a moment to go
		if lis, err = net.Listen("tcp", s.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("esdbfake: listen again on %s: %w", s.addr, err)
	}
	s.serve(lis)
	return nil
}

// Close stops the server for good.
func (s *Server) Close() {
	s.srvMu.Lock()
	s.closed = true
	s.srvMu.Unlock()
	s.Stop()
}

// DropSubscriptions ends every open subscription call with UNAVAILABLE, as a
// server does when it drops a subscriber; connections stay up.
func (s *Server) DropSubscriptions() {
	s.mu.Lock()
	close(s.drop)
	s.drop = make(chan struct{})
	s.mu.Unlock()
}

// Events is the number of events in the global log.
func (s *Server) Events() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.log)
}

// ---- ServerFeatures and Gossip ----

type featuresService struct {
	serverfeatures.UnimplementedServerFeaturesServer
}

// GetSupportedMethods lists what the fake implements; the client keys
// optional features (batch append, persistent subscriptions) off this list,
// so none of those are advertised.
func (featuresService) GetSupportedMethods(context.Context, *shared.Empty) (*serverfeatures.SupportedMethods, error) {
	const svc = "event_store.client.streams.streams"
	return &serverfeatures.SupportedMethods{
		EventStoreServerVersion: Version,
		Methods: []*serverfeatures.SupportedMethod{
			{ServiceName: svc, MethodName: "read"},
			{ServiceName: svc, MethodName: "append"},
		},
	}, nil
}

type gossipService struct {
	gossip.UnimplementedGossipServer
	s *Server
}

// Read reports a one-node cluster whose leader is this server, for clients
// configured with gossip seeds or DNS discovery.
func (g *gossipService) Read(context.Context, *shared.Empty) (*gossip.ClusterInfo, error) {
	host, portStr, _ := net.SplitHostPort(g.s.addr)
	port, _ := strconv.ParseUint(portStr, 10, 32)
	return &gossip.ClusterInfo{Members: []*gossip.MemberInfo{{
		InstanceId: toProtoUUID(uuid.NewSHA1(uuid.NameSpaceURL, []byte(g.s.addr)), true),
		TimeStamp:  time.Now().UnixNano() / 100,
		State:      gossip.MemberInfo_Leader,
		IsAlive:    true,
		HttpEndPoint: &gossip.EndPoint{
			Address: host,
			Port:    uint32(port),
		},
	}}}, nil
}
