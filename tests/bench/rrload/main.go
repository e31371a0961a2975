// Command rrload is a closed-loop ModelInfer load generator that balances over several servers
// with grpc-go's client-side round_robin: one channel, one subchannel per address, each call
// on the next READY address. It is how a Go service calls jaxport's scaled-out fronts (one
// front per Ray replica, docs/scale-out.md), and how tests/bench/scale_out.py measures them
// against one standalone server with the same program.
//
//	rrload --targets HOST:PORT[,HOST:PORT...] --model mlp --input x.f32 --shape 8,16
//	       --output probs --expect probs.f32 [--concurrency 16] [--duration 10s] [--warmup 1s]
//
// Every answer is checked: OK status, the output's values against --expect (float32,
// |got - want| <= atol + rtol * |want|). Prints one JSON object: requests, errors by code,
// req/s, latency percentiles (ms), and the calls each address answered (grpc.Peer).
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	pb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
)

type result struct {
	Targets     []string          `json:"targets"`
	Concurrency int               `json:"concurrency"`
	Seconds     float64           `json:"seconds"`
	Requests    int               `json:"requests"`
	Errors      map[string]int    `json:"errors"`
	Mismatches  int               `json:"mismatches"`
	RPS         float64           `json:"rps"`
	P50ms       float64           `json:"p50_ms"`
	P90ms       float64           `json:"p90_ms"`
	P99ms       float64           `json:"p99_ms"`
	ByAddress   map[string]int    `json:"by_address"`
	FirstError  string            `json:"first_error,omitempty"`
	Extra       map[string]string `json:"extra,omitempty"`
}

func readF32(path string) ([]float32, []byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	if len(raw)%4 != 0 {
		return nil, nil, fmt.Errorf("%s: %d bytes is not a whole number of float32", path, len(raw))
	}
	out := make([]float32, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out, raw, nil
}

// dialRoundRobin is the pattern docs/scale-out.md shows: a manual resolver holding the
// addresses and round_robin as the channel's load-balancing policy.
func dialRoundRobin(targets []string) (*grpc.ClientConn, error) {
	r := manual.NewBuilderWithScheme("jaxport")
	addrs := make([]resolver.Address, len(targets))
	for i, t := range targets {
		addrs[i] = resolver.Address{Addr: t}
	}
	r.InitialState(resolver.State{Addresses: addrs})
	return grpc.NewClient(r.Scheme()+":///fronts",
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"round_robin": {}}]}`))
}

func main() {
	targets := flag.String("targets", "", "comma-separated HOST:PORT of the servers")
	model := flag.String("model", "mlp", "model name")
	inputName := flag.String("input-name", "x", "input tensor name")
	inputFile := flag.String("input", "", "raw little-endian float32 input")
	shapeText := flag.String("shape", "", "input shape, e.g. 8,16")
	outputName := flag.String("output", "", "output checked against --expect")
	expectFile := flag.String("expect", "", "raw little-endian float32 expected output")
	rtol := flag.Float64("rtol", 1e-5, "relative tolerance")
	atol := flag.Float64("atol", 1e-6, "absolute tolerance")
	concurrency := flag.Int("concurrency", 16, "callers, each sending its next request when the last answered")
	duration := flag.Duration("duration", 10*time.Second, "measured time")
	warmup := flag.Duration("warmup", time.Second, "unmeasured time first")
	flag.Parse()
	fail := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "rrload: error: "+format+"\n", args...)
		os.Exit(2)
	}
	if *targets == "" || *inputFile == "" || *shapeText == "" || *outputName == "" || *expectFile == "" {
		fail("--targets, --input, --shape, --output and --expect are required")
	}
	addrs := strings.Split(*targets, ",")
	var shape []int64
	for _, s := range strings.Split(*shapeText, ",") {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			fail("--shape %q: %v", *shapeText, err)
		}
		shape = append(shape, n)
	}
	_, inputRaw, err := readF32(*inputFile)
	if err != nil {
		fail("%v", err)
	}
	want, _, err := readF32(*expectFile)
	if err != nil {
		fail("%v", err)
	}
	conn, err := dialRoundRobin(addrs)
	if err != nil {
		fail("%v", err)
	}
	defer conn.Close()
	stub := pb.NewGRPCInferenceServiceClient(conn)
	req := &pb.ModelInferRequest{ModelName: *model,
		Inputs:           []*pb.ModelInferRequest_InferInputTensor{{Name: *inputName, Datatype: "FP32", Shape: shape}},
		RawInputContents: [][]byte{inputRaw}}

	// Wait until every address is connected, so the measurement starts balanced: one call
	// per address with wait-for-ready (round_robin sends consecutive calls to distinct READY
	// subchannels once all are up; calls before that may all go to the first).
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	seen := map[string]bool{}
	for len(seen) < len(addrs) && ctx.Err() == nil {
		var p peer.Peer
		if _, err := stub.ModelInfer(ctx, req, grpc.WaitForReady(true), grpc.Peer(&p)); err != nil {
			fail("first call: %v", err)
		}
		seen[p.Addr.String()] = true
	}
	cancel()
	if len(seen) < len(addrs) {
		fail("only %d of %d addresses answered within 60 s", len(seen), len(addrs))
	}

	check := func(resp *pb.ModelInferResponse) bool {
		for i, out := range resp.Outputs {
			if out.Name != *outputName || i >= len(resp.RawOutputContents) {
				continue
			}
			raw := resp.RawOutputContents[i]
			if len(raw) != 4*len(want) {
				return false
			}
			for j, w := range want {
				g := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*j:]))
				if math.Abs(float64(g-w)) > *atol+*rtol*math.Abs(float64(w)) {
					return false
				}
			}
			return true
		}
		return false
	}

	var mu sync.Mutex
	res := result{Targets: addrs, Concurrency: *concurrency, Errors: map[string]int{}, ByAddress: map[string]int{}}
	var latencies []float64
	start := time.Now()
	measureFrom := start.Add(*warmup)
	end := measureFrom.Add(*duration)
	var wg sync.WaitGroup
	for c := 0; c < *concurrency; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []float64
			errs := map[string]int{}
			by := map[string]int{}
			mismatches := 0
			first := ""
			for {
				t0 := time.Now()
				if !t0.Before(end) {
					break
				}
				var p peer.Peer
				resp, err := stub.ModelInfer(context.Background(), req, grpc.Peer(&p))
				t1 := time.Now()
				if t0.Before(measureFrom) {
					continue
				}
				if err != nil {
					errs[status.Code(err).String()]++
					if first == "" {
						first = err.Error()
					}
					continue
				}
				if !check(resp) {
					mismatches++
				}
				if p.Addr != nil {
					by[p.Addr.String()]++
				}
				mine = append(mine, t1.Sub(t0).Seconds()*1000)
			}
			mu.Lock()
			latencies = append(latencies, mine...)
			for k, v := range errs {
				res.Errors[k] += v
			}
			for k, v := range by {
				res.ByAddress[k] += v
			}
			res.Mismatches += mismatches
			if res.FirstError == "" {
				res.FirstError = first
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.Seconds = duration.Seconds()
	sort.Float64s(latencies)
	res.Requests = len(latencies)
	for _, n := range res.Errors {
		res.Requests += n
	}
	res.RPS = float64(len(latencies)) / res.Seconds
	pct := func(q float64) float64 {
		if len(latencies) == 0 {
			return 0
		}
		return latencies[int(q*float64(len(latencies)-1))]
	}
	res.P50ms, res.P90ms, res.P99ms = pct(0.5), pct(0.9), pct(0.99)
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(res); err != nil {
		fail("%v", err)
	}
	if res.Mismatches > 0 {
		os.Exit(1)
	}
}
