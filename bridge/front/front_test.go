package main

import (
	"bytes"
	"net"
	"runtime"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
)

func TestFrontProcsLeavesTheWorkersTheirCores(t *testing.T) {
	for _, c := range []struct{ cpus, workers, want int }{
		{2, 2, 1}, {2, 1, 1}, {1, 2, 1}, {8, 2, 6}, {16, 4, 12},
	} {
		if got := frontProcs(c.cpus, c.workers, false, false); got != c.want {
			t.Errorf("frontProcs(%d cpus, %d workers) = %d, want %d", c.cpus, c.workers, got, c.want)
		}
		// The native engine executes in the front: every core.
		if got := frontProcs(c.cpus, c.workers, true, false); got != c.cpus {
			t.Errorf("frontProcs(%d cpus, %d workers, native) = %d, want %d", c.cpus, c.workers, got, c.cpus)
		}
	}
	if got, want := frontProcs(64, 1, true, true), runtime.GOMAXPROCS(0); got != want {
		t.Errorf("an explicit GOMAXPROCS must be kept: got %d, want %d", got, want)
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	h := header{length: 7, ftype: frameReply, method: 5, code: 3, id: 1 << 40, aux: -1}
	var b [headerSize]byte
	h.encode(b[:])
	got, err := readHeader(bytes.NewReader(b[:]), make([]byte, headerSize))
	if err != nil || got != h {
		t.Fatalf("got %+v, %v", got, err)
	}
}

func TestMergeMetricsLabelsAndGroupsFamilies(t *testing.T) {
	w0 := "# HELP a_total A\n# TYPE a_total counter\na_total{model=\"m\"} 1.0\n# HELP b B\n# TYPE b gauge\nb 2.0\n"
	w1 := "# HELP a_total A\n# TYPE a_total counter\na_total{model=\"m\"} 4.0\n# HELP b B\n# TYPE b gauge\nb 5.0\n"
	got := mergeMetrics(map[int]string{0: w0, 1: w1}, []int{0, 1})
	want := "# HELP a_total A\n# TYPE a_total counter\n" +
		"a_total{worker=\"0\",model=\"m\"} 1.0\na_total{worker=\"1\",model=\"m\"} 4.0\n" +
		"# HELP b B\n# TYPE b gauge\nb{worker=\"0\"} 2.0\nb{worker=\"1\"} 5.0\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

func TestTokenMatches(t *testing.T) {
	token := []byte("s3cret")
	for header, ok := range map[string]bool{
		"Bearer s3cret": true, "bearer s3cret ": true, "BEARER s3cret": true,
		"Bearer s3cre": false, "Basic s3cret": false, "s3cret": false, "": false,
	} {
		if tokenMatches([]string{header}, token) != ok {
			t.Errorf("%q: want %v", header, ok)
		}
	}
	if tokenMatches(nil, token) {
		t.Error("no header must not match")
	}
}

func TestServerReadyGoesToAWorkerStillLoading(t *testing.T) {
	loading, ready := &conn{}, &conn{}
	f := &front{workers: []*worker{
		{index: 0, conn: ready, ready: true},
		{index: 1},                              // down (restarting): cannot answer
		{index: 2, conn: loading, ready: false}, // connected, repository still loading
	}}
	if got := f.pickNotReady(); got != loading {
		t.Fatalf("pickNotReady chose %p, want the loading worker %p", got, loading)
	}
	f.workers[2].ready = true
	if got := f.pickNotReady(); got != nil {
		t.Fatalf("all connected workers ready: got %p, want nil", got)
	}
	if got := f.pick(); got != ready && got != loading {
		t.Fatalf("pick chose a worker that is down")
	}
}

func TestReadLoopDeliversRepliesAndRefusesBadFrames(t *testing.T) {
	front, worker := net.Pipe()
	k := newConn(front, 1<<20)
	ch := make(chan *reply, 1)
	k.pending[7] = ch
	ready := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() { done <- k.readLoop(func() { ready <- struct{}{} }) }()

	send := func(h header, payload []byte) {
		var b [headerSize]byte
		h.length = uint32(len(payload))
		h.encode(b[:])
		if _, err := worker.Write(append(b[:], payload...)); err != nil {
			t.Fatal(err)
		}
	}
	send(header{ftype: frameReady}, nil)
	<-ready
	send(header{ftype: frameReply, id: 7, code: 5, aux: 3}, []byte("msgBODY"))
	r := <-ch
	if r.code != 5 || r.message != "msg" || string(r.bodySlice().Materialize()) != "BODY" {
		t.Fatalf("reply %+v", r)
	}
	waiting := make(chan *reply, 1)
	k.mu.Lock()
	k.pending[8] = waiting
	k.mu.Unlock()
	send(header{ftype: frameReply, id: 9, aux: 9}, []byte("short"))
	if err := <-done; err == nil || !strings.Contains(err.Error(), "beyond payload") {
		t.Fatalf("readLoop error %v", err)
	}
	if gone := <-waiting; gone.code != uint16(codes.Unavailable) || gone.message != workerGoneMessage {
		t.Fatalf("pending call after a bad frame: %+v", gone)
	}
}
