package main

// /metrics on --metrics-port: every worker's Prometheus registry (the bridge's own families,
// scraped over the framed protocol with a METRICS frame) with a `worker` label added to each
// sample, merged family by family, plus the front's own families and Triton's nv_inference_*
// families computed from the merged ModelStatistics (metrics_triton.go).

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

const frameMetrics = 10

// frontMetricsIndex keys the front's own samples of the workers' families (native models)
// among the workers' exports; they are labelled worker="front".
const frontMetricsIndex = -1

// family is one metric family of the text format: its comment lines and its samples.
type family struct {
	comments []string
	samples  []string
}

// withLabel inserts `worker="N"` as the first label of a sample line.
func withLabel(sample, label string) string {
	name, rest, ok := strings.Cut(sample, "{")
	if ok {
		if strings.HasPrefix(rest, "}") {
			return name + "{" + label + rest
		}
		return name + "{" + label + "," + rest
	}
	name, rest, _ = strings.Cut(sample, " ")
	return name + "{" + label + "} " + rest
}

// mergeMetrics merges text-format exports, labelling each export's samples with its worker.
func mergeMetrics(texts map[int]string, order []int) string {
	families := map[string]*family{}
	var names []string
	get := func(name string) *family {
		f, ok := families[name]
		if !ok {
			f = &family{}
			families[name] = f
			names = append(names, name)
		}
		return f
	}
	for _, w := range order {
		label := fmt.Sprintf("worker=\"%d\"", w)
		if w == frontMetricsIndex {
			label = `worker="front"`
		}
		current := ""
		seen := map[string]bool{}
		sc := bufio.NewScanner(strings.NewReader(texts[w]))
		sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
		for sc.Scan() {
			line := sc.Text()
			if line == "" {
				continue
			}
			if strings.HasPrefix(line, "# ") {
				fields := strings.Fields(line)
				if len(fields) >= 3 && (fields[1] == "HELP" || fields[1] == "TYPE") {
					current = fields[2]
					f := get(current)
					key := fields[1] + " " + current
					if !seen[key] && len(f.comments) < 2 {
						f.comments = append(f.comments, line)
					}
					seen[key] = true
				}
				continue
			}
			get(current).samples = append(get(current).samples, withLabel(line, label))
		}
	}
	var b strings.Builder
	for _, name := range names {
		f := families[name]
		for _, c := range f.comments {
			b.WriteString(c + "\n")
		}
		for _, s := range f.samples {
			b.WriteString(s + "\n")
		}
	}
	return b.String()
}

var workerRestarts atomic.Int64

// scrape asks every connected worker for its registry.
func (f *front) scrape(ctx context.Context) (map[int]string, []int) {
	texts := map[int]string{}
	var order []int
	for _, w := range f.workers {
		k, _ := w.current()
		if k == nil {
			continue
		}
		r, err := k.callFrame(ctx, frameMetrics, 0, nil)
		if err != nil || r.code != 0 {
			slog.Warn("metrics scrape of a worker failed", "worker", w.index)
			continue
		}
		texts[w.index] = string(r.bodySlice().Materialize())
		r.free()
		order = append(order, w.index)
	}
	return texts, order
}

func (f *front) frontMetrics() string {
	ready := 0
	for _, w := range f.workers {
		if _, ok := w.current(); ok {
			ready++
		}
	}
	return fmt.Sprintf("# HELP jaxport_front_workers Worker processes by state\n"+
		"# TYPE jaxport_front_workers gauge\n"+
		"jaxport_front_workers{state=\"configured\"} %d\n"+
		"jaxport_front_workers{state=\"ready\"} %d\n"+
		"# HELP jaxport_front_worker_restarts_total Worker processes restarted after exiting\n"+
		"# TYPE jaxport_front_worker_restarts_total counter\n"+
		"jaxport_front_worker_restarts_total %d\n", len(f.workers), ready, workerRestarts.Load())
}

// serveMetrics binds host:port (0 = free port) and serves /metrics; the bound port.
func (f *front) serveMetrics() (int, error) {
	lis, err := net.Listen("tcp", net.JoinHostPort(f.host, strconv.Itoa(f.metricsPort)))
	if err != nil {
		return 0, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		texts, order := f.scrape(ctx)
		if text := f.native.metricsText(); text != "" { // natively executed requests
			texts[frontMetricsIndex] = text
			order = append(order, frontMetricsIndex)
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		fmt.Fprint(w, f.frontMetrics())
		if stats, err := f.modelStatistics(ctx); err == nil {
			fmt.Fprint(w, tritonMetrics(stats, inferPending.snapshot()))
		} else {
			slog.Warn("metrics: no ModelStatistics for the nv_inference_* families", "error", err.Error())
		}
		fmt.Fprint(w, mergeMetrics(texts, order))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	return lis.Addr().(*net.TCPAddr).Port, nil
}
