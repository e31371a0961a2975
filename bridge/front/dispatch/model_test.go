package dispatch

// A served version over a backend of the test's own: an error the engine returns without a
// status (a bug, or a failure the engine could not word) reaches the caller as INTERNAL
// "internal error" with its text only in the log; Close (an unload) returns while requests
// are in flight, new ones are refused from then on, and the backend lets the version go once
// the last of them is done.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jaxport/jaxport/bridge/front/request"
	"github.com/jaxport/jaxport/bridge/front/shm"
	"github.com/jaxport/jaxport/bridge/front/status"
	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
	"google.golang.org/grpc/codes"
)

// fakeExe answers every program with run's result; closed counts Close calls.
type fakeExe struct {
	run    func(ctx context.Context, inputs []request.Tensor) ([]request.Tensor, error)
	closed atomic.Int32
}

func (f *fakeExe) Execute(ctx context.Context, _ int, inputs []request.Tensor) ([]request.Tensor, error) {
	return f.run(ctx, inputs)
}
func (f *fakeExe) LoadSeconds() map[string]float64 { return map[string]float64{} }
func (f *fakeExe) Close()                          { f.closed.Add(1) }

type fakeWorkers struct{ exe *fakeExe }

func (w fakeWorkers) Open(context.Context, Artifact, string) (Executable, error) { return w.exe, nil }

// served loads m (x FP32[2] -> y FP32[2]) on exe through the workers' path.
func served(t *testing.T, exe *fakeExe, log *slog.Logger) *Model {
	t.Helper()
	m := &jaxportv1.Manifest{Inputs: []*jaxportv1.TensorSpec{fp32("x", 2)}, Outputs: []*jaxportv1.TensorSpec{fp32("y", 2)},
		Programs: []*jaxportv1.Program{{MlirbcFile: "model.mlirbc",
			Results: []*jaxportv1.Result{{Name: "y", Role: jaxportv1.ResultRole_RESULT_ROLE_OUTPUT}}}}}
	model, err := New(Options{Engine: EngineExported, Workers: fakeWorkers{exe}, Log: log}).Load(context.Background(), artifactOf(m))
	if err != nil {
		t.Fatal(err)
	}
	return model
}

func twoFloats(a, b float32) []byte {
	out := make([]byte, 8)
	binary.LittleEndian.PutUint32(out, math.Float32bits(a))
	binary.LittleEndian.PutUint32(out[4:], math.Float32bits(b))
	return out
}

func inferRequest() *request.Request {
	return &request.Request{Model: "m", Inputs: []request.Input{{Name: "x", Datatype: "FP32", Shape: []int64{2}}},
		Raw: [][]byte{twoFloats(1, 2)}}
}

func TestAnErrorWithoutAStatusIsInternalWithItsTextOnlyInTheLog(t *testing.T) {
	var logged bytes.Buffer
	exe := &fakeExe{run: func(context.Context, []request.Tensor) ([]request.Tensor, error) {
		return nil, errors.New("RuntimeError: the engine's own words")
	}}
	model := served(t, exe, slog.New(slog.NewTextHandler(&logged, nil)))
	_, err := model.Infer(context.Background(), inferRequest(), shm.Disabled{})
	if status.Code(err) != codes.Internal || status.Convert(err).Message() != "internal error" {
		t.Fatalf("got %v; want INTERNAL \"internal error\"", err)
	}
	if !strings.Contains(logged.String(), "the engine's own words") || !strings.Contains(logged.String(), "model=m") {
		t.Fatalf("the log does not carry the error's text and model: %q", logged.String())
	}
	// an error with a status keeps it (a worker gone, a deadline)
	exe.run = func(context.Context, []request.Tensor) ([]request.Tensor, error) {
		return nil, status.New(codes.Unavailable, "execution worker exited while handling the request")
	}
	_, err = model.Infer(context.Background(), inferRequest(), shm.Disabled{})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "execution worker exited") {
		t.Fatalf("a status error: %v", err)
	}
	// the statistics count both failures
	if n := model.Stats.Statistics("m", "1").GetInferenceStats().GetFail().GetCount(); n != 2 {
		t.Fatalf("failures counted: %d", n)
	}
}

func TestCloseDoesNotWaitForRequestsInFlight(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 4)
	exe := &fakeExe{run: func(context.Context, []request.Tensor) ([]request.Tensor, error) {
		started <- struct{}{}
		<-release
		return []request.Tensor{{Shape: []int64{2}, Data: twoFloats(3, 4)}}, nil
	}}
	model := served(t, exe, slog.New(slog.DiscardHandler))
	done := make(chan error, 2)
	for range 2 {
		if !model.Acquire() {
			t.Fatal("Acquire refused before Close")
		}
		go func() {
			defer model.Done()
			resp, err := model.Infer(context.Background(), inferRequest(), shm.Disabled{})
			if err == nil && !bytes.Equal(resp.Outputs[0].Data, twoFloats(3, 4)) {
				err = errors.New("wrong answer")
			}
			done <- err
		}()
	}
	<-started
	<-started
	closed := make(chan struct{})
	go func() { model.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for the requests in flight")
	}
	if model.Acquire() {
		t.Fatal("a closed version acquired a new request")
	}
	if exe.closed.Load() != 0 {
		t.Fatal("the backend let the version go under requests in flight")
	}
	close(release)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatalf("a request in flight: %v", err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for exe.closed.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := exe.closed.Load(); n != 1 {
		t.Fatalf("backend closed %d times after the last request; want once", n)
	}
	model.Close() // again: nothing more
	time.Sleep(10 * time.Millisecond)
	if n := exe.closed.Load(); n != 1 {
		t.Fatalf("a second Close closed the backend again (%d)", n)
	}
}

func TestCloseWithNothingInFlightReleasesAtOnce(t *testing.T) {
	exe := &fakeExe{run: func(context.Context, []request.Tensor) ([]request.Tensor, error) { return nil, nil }}
	model := served(t, exe, slog.New(slog.DiscardHandler))
	model.Close()
	if n := exe.closed.Load(); n != 1 {
		t.Fatalf("backend closed %d times; want 1 when Close returns", n)
	}
}
