package main

// The front's configuration: ONE resolved document, handed over by `jaxport serve`
// (jaxport.bridge.cli.front_config) from the Settings it validated (bridge/settings.py), so
// the front defines no defaults and parses no `jaxport serve` flag of its own:
//
//	jaxport-front --config '{"host": "127.0.0.1", "port": 8001, ...}'
//
// Every field is required (null for a path that is not set); an unknown field is refused,
// so the two sides cannot drift apart silently. The workers get their flags in worker_args
// (the `jaxport serve` flags as given) and read them with the same Settings.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"
)

// config is the document `jaxport serve` writes (field names as Settings names them).
type config struct {
	Host            string   `json:"host"`
	Port            int      `json:"port"`              // 0 = any free port
	PortFile        string   `json:"port_file"`         // null = none
	MetricsPort     int      `json:"metrics_port"`      // 0 = any free port, -1 = off
	HTTPPort        int      `json:"http_port"`         // REST; 0 = any free port, -1 = off
	Workers         int      `json:"workers"`           // execution worker processes
	WorkerCmd       []string `json:"worker_cmd"`        // argv of a worker, without its flags
	WorkerArgs      []string `json:"worker_args"`       // the `jaxport serve` flags, for every worker
	MaxMessageBytes int      `json:"max_message_bytes"` // largest message in or out
	GracePeriodS    float64  `json:"grace_period_s"`    // SIGTERM drain time
	TLSCert         string   `json:"tls_cert"`          // null = no TLS
	TLSKey          string   `json:"tls_key"`
	TLSClientCA     string   `json:"tls_client_ca"`   // null = no client certificates asked
	AuthTokenFile   string   `json:"auth_token_file"` // null = no token
	// The native engine (native.go): the PJRT plugin ("cpu", "cuda", a .so path; null = every
	// model on the workers) and the limits the workers apply, applied by the front to the
	// requests it executes itself.
	PJRTPlugin          string `json:"pjrt_plugin"`
	MaxInflightPerModel int    `json:"max_inflight_per_model"`
	MaxQueuePerModel    int    `json:"max_queue_per_model"`
	BatchQueueSize      int    `json:"batch_queue_size"`
	// Tracing (tracing.go): HOST:PORT of the OTLP/gRPC receiver spans go to; null = off.
	TraceOTLPEndpoint string `json:"trace_otlp_endpoint"`
}

// configFields are the JSON names of config's fields, each required.
func configFields() []string {
	t := reflect.TypeOf(config{})
	names := make([]string, t.NumField())
	for i := range names {
		names[i] = t.Field(i).Tag.Get("json")
	}
	return names
}

// parseConfig reads and checks the document: every field present, none unknown, values the
// front can use (Settings checked them already; a hand-written document gets the same lines).
func parseConfig(doc string) (*config, error) {
	var present map[string]json.RawMessage
	if err := json.Unmarshal([]byte(doc), &present); err != nil {
		return nil, fmt.Errorf("--config is not a JSON object: %v", err)
	}
	var missing []string
	for _, name := range configFields() {
		if _, ok := present[name]; !ok {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("--config lacks %s (jaxport serve writes every field)", strings.Join(missing, ", "))
	}
	c := &config{}
	dec := json.NewDecoder(bytes.NewReader([]byte(doc)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(c); err != nil {
		return nil, fmt.Errorf("--config: %v", err)
	}
	switch {
	case c.Port < 0 || c.Port > 65535:
		return nil, fmt.Errorf("--config: port must be in 0..65535, got %d", c.Port)
	case c.MetricsPort < -1 || c.MetricsPort > 65535:
		return nil, fmt.Errorf("--config: metrics_port must be in -1..65535, got %d", c.MetricsPort)
	case c.HTTPPort < -1 || c.HTTPPort > 65535:
		return nil, fmt.Errorf("--config: http_port must be in -1..65535, got %d", c.HTTPPort)
	case c.Workers < 1:
		return nil, fmt.Errorf("--config: workers must be >= 1, got %d", c.Workers)
	case c.MaxMessageBytes < 1:
		return nil, fmt.Errorf("--config: max_message_bytes must be >= 1, got %d", c.MaxMessageBytes)
	case c.GracePeriodS < 0:
		return nil, fmt.Errorf("--config: grace_period_s must be >= 0, got %v", c.GracePeriodS)
	case len(c.WorkerCmd) == 0:
		return nil, fmt.Errorf("--config: worker_cmd is empty")
	case c.MaxInflightPerModel < 1:
		return nil, fmt.Errorf("--config: max_inflight_per_model must be >= 1, got %d", c.MaxInflightPerModel)
	case c.MaxQueuePerModel < 0:
		return nil, fmt.Errorf("--config: max_queue_per_model must be >= 0, got %d", c.MaxQueuePerModel)
	case c.BatchQueueSize < 1:
		return nil, fmt.Errorf("--config: batch_queue_size must be >= 1, got %d", c.BatchQueueSize)
	}
	return c, nil
}

var errHelp = fmt.Errorf("help")

const usage = `usage: jaxport-front --config JSON
The front's one resolved configuration, written by jaxport serve from the Settings it checked
(jaxport.bridge.cli.front_config): host, port, port_file, metrics_port, http_port, workers,
worker_cmd, worker_args (the jaxport serve flags every worker gets), max_message_bytes,
grace_period_s, tls_cert, tls_key, tls_client_ca, auth_token_file, pjrt_plugin,
max_inflight_per_model, max_queue_per_model, batch_queue_size, trace_otlp_endpoint. Run
jaxport serve.`

// parseArgs reads the front's command line: --config JSON (or --config=JSON), nothing else.
func parseArgs(argv []string) (*front, error) {
	var doc *string
	for i := 0; i < len(argv); i++ {
		arg := argv[i]
		if arg == "-h" || arg == "--help" {
			return nil, errHelp
		}
		name, value, hasValue := strings.Cut(arg, "=")
		if name != "--config" || doc != nil {
			return nil, fmt.Errorf("unexpected argument %q: the front takes --config JSON, written by jaxport serve", arg)
		}
		if !hasValue {
			if i+1 >= len(argv) {
				return nil, fmt.Errorf("--config needs a value")
			}
			i++
			value = argv[i]
		}
		doc = &value
	}
	if doc == nil {
		return nil, fmt.Errorf("--config is required (the front is started by jaxport serve)")
	}
	c, err := parseConfig(*doc)
	if err != nil {
		return nil, err
	}
	return &front{host: c.Host, port: c.Port, portFile: c.PortFile, metricsPort: c.MetricsPort,
		httpPort: c.HTTPPort, nWorkers: c.Workers, workerCmd: c.WorkerCmd, workerArgs: c.WorkerArgs,
		maxMessageBytes: c.MaxMessageBytes, gracePeriod: time.Duration(c.GracePeriodS * float64(time.Second)),
		tlsCert: c.TLSCert, tlsKey: c.TLSKey, tlsClientCA: c.TLSClientCA, authTokenFile: c.AuthTokenFile,
		routes: newRouter(), pjrtPlugin: c.PJRTPlugin, maxInflight: c.MaxInflightPerModel,
		maxQueue: c.MaxQueuePerModel, batchQueueSize: c.BatchQueueSize, traceEndpoint: c.TraceOTLPEndpoint}, nil
}
