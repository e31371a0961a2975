package main

// Unit tests of the front's configuration hand-off (config.go).

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// fullConfig is a document as jaxport serve writes it (every field), changed by `edit`.
func fullConfig(t *testing.T, edit func(map[string]any)) string {
	t.Helper()
	doc := map[string]any{
		"host": "127.0.0.1", "port": 0, "port_file": "/tmp/ports.json", "metrics_port": -1,
		"http_port": 0, "workers": 3, "worker_cmd": []string{"py", "-m", "jaxport.bridge.worker"},
		"worker_args":       []string{"--repository", "repo", "--engine", "pjrt", "--batching", "--workers", "3"},
		"max_message_bytes": 1024, "grace_period_s": 2.5, "tls_cert": nil, "tls_key": nil,
		"tls_client_ca": nil, "auth_token_file": "/run/token", "pjrt_plugin": "cpu",
		"max_inflight_per_model": 4, "max_queue_per_model": 64, "batch_queue_size": 1024,
		"trace_otlp_endpoint": "127.0.0.1:4317",
	}
	if edit != nil {
		edit(doc)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestConfigIsTakenAsWritten(t *testing.T) {
	for _, argv := range [][]string{{"--config", fullConfig(t, nil)}, {"--config=" + fullConfig(t, nil)}} {
		f, err := parseArgs(argv)
		if err != nil {
			t.Fatal(err)
		}
		if f.host != "127.0.0.1" || f.port != 0 || f.portFile != "/tmp/ports.json" || f.metricsPort != -1 ||
			f.httpPort != 0 || f.nWorkers != 3 || f.maxMessageBytes != 1024 || f.gracePeriod != 2500*time.Millisecond {
			t.Fatalf("front: %+v", f)
		}
		if f.tlsCert != "" || f.tlsKey != "" || f.tlsClientCA != "" || f.authTokenFile != "/run/token" {
			t.Fatalf("paths (null = not set): %+v", f)
		}
		// The workers get the jaxport serve flags verbatim; the front reads none of them.
		want := []string{"--repository", "repo", "--engine", "pjrt", "--batching", "--workers", "3"}
		if !reflect.DeepEqual(f.workerArgs, want) || !reflect.DeepEqual(f.workerCmd, []string{"py", "-m", "jaxport.bridge.worker"}) {
			t.Fatalf("workers: %q %q", f.workerCmd, f.workerArgs)
		}
		if f.routes == nil {
			t.Fatal("no router")
		}
		if f.pjrtPlugin != "cpu" || f.maxInflight != 4 || f.maxQueue != 64 || f.batchQueueSize != 1024 ||
			f.traceEndpoint != "127.0.0.1:4317" {
			t.Fatalf("native engine settings: %+v", f)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	set := func(k string, v any) func(map[string]any) { return func(d map[string]any) { d[k] = v } }
	drop := func(ks ...string) func(map[string]any) {
		return func(d map[string]any) {
			for _, k := range ks {
				delete(d, k)
			}
		}
	}
	for _, c := range []struct {
		argv []string
		msg  string
	}{
		{nil, "--config is required (the front is started by jaxport serve)"},
		{[]string{"--config"}, "--config needs a value"},
		{[]string{"--workers", "0"}, `unexpected argument "--workers": the front takes --config JSON, written by jaxport serve`},
		{[]string{"--config", fullConfig(t, nil), "--port", "1"}, `unexpected argument "--port": the front takes --config JSON, written by jaxport serve`},
		{[]string{"--config", "[1]"}, "--config is not a JSON object: json: cannot unmarshal array into Go value of type map[string]json.RawMessage"},
		{[]string{"--config", fullConfig(t, drop("workers", "host"))}, "--config lacks host, workers (jaxport serve writes every field)"},
		{[]string{"--config", fullConfig(t, set("batching", true))}, `--config: json: unknown field "batching"`},
		{[]string{"--config", fullConfig(t, set("workers", 0))}, "--config: workers must be >= 1, got 0"},
		{[]string{"--config", fullConfig(t, set("port", 70000))}, "--config: port must be in 0..65535, got 70000"},
		{[]string{"--config", fullConfig(t, set("metrics_port", -2))}, "--config: metrics_port must be in -1..65535, got -2"},
		{[]string{"--config", fullConfig(t, set("http_port", -2))}, "--config: http_port must be in -1..65535, got -2"},
		{[]string{"--config", fullConfig(t, set("max_message_bytes", 0))}, "--config: max_message_bytes must be >= 1, got 0"},
		{[]string{"--config", fullConfig(t, set("grace_period_s", -1))}, "--config: grace_period_s must be >= 0, got -1"},
		{[]string{"--config", fullConfig(t, set("worker_cmd", []string{}))}, "--config: worker_cmd is empty"},
		{[]string{"--config", fullConfig(t, set("max_inflight_per_model", 0))}, "--config: max_inflight_per_model must be >= 1, got 0"},
		{[]string{"--config", fullConfig(t, set("max_queue_per_model", -1))}, "--config: max_queue_per_model must be >= 0, got -1"},
		{[]string{"--config", fullConfig(t, set("batch_queue_size", 0))}, "--config: batch_queue_size must be >= 1, got 0"},
		{[]string{"--config", fullConfig(t, set("port", "x"))}, "--config: json: cannot unmarshal string into Go struct field config.port of type int"},
	} {
		_, err := parseArgs(c.argv)
		if err == nil || err.Error() != c.msg {
			t.Errorf("%.60q: got %v, want %q", strings.Join(c.argv, " "), err, c.msg)
		}
	}
	if _, err := parseArgs([]string{"--help"}); err != errHelp {
		t.Errorf("--help: %v", err)
	}
}
