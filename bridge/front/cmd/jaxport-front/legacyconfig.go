package main

// TEMPORARY (until ONE-CLI's package config lands): today's `--config JSON` that jaxport
// serve hands the front, and the `jaxport serve` flags in its worker_args read for what the
// front now does itself (repository, engine, batching, shared memory). Deleted when cmd
// calls config.Parse.

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

type modelBatching struct {
	name      string
	delayUs   *int
	preferred []int
}

type options struct {
	host                                        string
	port, metricsPort, httpPort                 int
	portFile                                    string
	workers                                     int
	workerPython                                string
	maxMessageBytes                             int
	gracePeriod                                 time.Duration
	tlsCert, tlsKey, tlsClientCA, authTokenFile string
	pjrtPlugin                                  string
	maxInflight, maxQueue, batchQueueSize       int
	traceEndpoint                               string
	repository, modelName, versionPolicy        string
	engine                                      string
	batching                                    bool
	maxQueueDelayUs                             int
	preferred                                   []int
	batchingModels                              []modelBatching
	systemSharedMemory                          bool
	compiledShapes, cpuDevices                  int
}

var errHelp = fmt.Errorf("help")

func parseLegacy(argv []string) (*options, error) {
	var doc string
	for i := 0; i < len(argv); i++ {
		if argv[i] == "-h" || argv[i] == "--help" {
			return nil, errHelp
		}
		name, value, has := strings.Cut(argv[i], "=")
		if name != "--config" {
			return nil, fmt.Errorf("unexpected argument %q", argv[i])
		}
		if !has {
			if i+1 >= len(argv) {
				return nil, fmt.Errorf("--config needs a value")
			}
			i++
			value = argv[i]
		}
		doc = value
	}
	var c struct {
		Host                string   `json:"host"`
		Port                int      `json:"port"`
		PortFile            *string  `json:"port_file"`
		MetricsPort         int      `json:"metrics_port"`
		HTTPPort            int      `json:"http_port"`
		Workers             int      `json:"workers"`
		WorkerCmd           []string `json:"worker_cmd"`
		WorkerArgs          []string `json:"worker_args"`
		MaxMessageBytes     int      `json:"max_message_bytes"`
		GracePeriodS        float64  `json:"grace_period_s"`
		TLSCert             *string  `json:"tls_cert"`
		TLSKey              *string  `json:"tls_key"`
		TLSClientCA         *string  `json:"tls_client_ca"`
		AuthTokenFile       *string  `json:"auth_token_file"`
		PJRTPlugin          *string  `json:"pjrt_plugin"`
		MaxInflightPerModel int      `json:"max_inflight_per_model"`
		MaxQueuePerModel    int      `json:"max_queue_per_model"`
		BatchQueueSize      int      `json:"batch_queue_size"`
		TraceOTLPEndpoint   *string  `json:"trace_otlp_endpoint"`
	}
	if err := json.Unmarshal([]byte(doc), &c); err != nil {
		return nil, fmt.Errorf("--config is not a JSON object: %v", err)
	}
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	o := &options{host: c.Host, port: c.Port, portFile: str(c.PortFile), metricsPort: c.MetricsPort, httpPort: c.HTTPPort,
		workers: c.Workers, maxMessageBytes: c.MaxMessageBytes, gracePeriod: time.Duration(c.GracePeriodS * float64(time.Second)),
		tlsCert: str(c.TLSCert), tlsKey: str(c.TLSKey), tlsClientCA: str(c.TLSClientCA), authTokenFile: str(c.AuthTokenFile),
		pjrtPlugin: str(c.PJRTPlugin), maxInflight: c.MaxInflightPerModel, maxQueue: c.MaxQueuePerModel,
		batchQueueSize: c.BatchQueueSize, traceEndpoint: str(c.TraceOTLPEndpoint), versionPolicy: "latest",
		maxQueueDelayUs: 1000, compiledShapes: 32}
	if len(c.WorkerCmd) > 0 {
		o.workerPython = c.WorkerCmd[0]
	}
	flags := map[string]string{}
	bools := map[string]bool{"batching": true, "system-shared-memory": true}
	for i := 0; i < len(c.WorkerArgs); i++ {
		a := c.WorkerArgs[i]
		if !strings.HasPrefix(a, "--") {
			continue
		}
		name, value, has := strings.Cut(a[2:], "=")
		if !has && bools[name] {
			if i+1 < len(c.WorkerArgs) && !strings.HasPrefix(c.WorkerArgs[i+1], "--") {
				i++
				value = c.WorkerArgs[i]
			} else {
				value = "true"
			}
		} else if !has && i+1 < len(c.WorkerArgs) {
			i++
			value = c.WorkerArgs[i]
		}
		flags[name] = value
	}
	get := func(name string) (string, bool) {
		if v, ok := flags[name]; ok {
			return v, true
		}
		v, ok := os.LookupEnv("JAXPORT_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_")))
		return v, ok
	}
	truth := func(v string) bool {
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "1", "true", "yes", "on":
			return true
		}
		return false
	}
	o.repository, _ = get("repository")
	o.modelName, _ = get("model-name")
	if v, ok := get("model-version-policy"); ok {
		o.versionPolicy = v
	}
	if v, ok := get("engine"); ok && v != "exported" {
		o.engine = v
	}
	if v, ok := get("engine"); ok && v == "exported" {
		o.engine = "exported"
	}
	if v, ok := get("batching"); ok {
		o.batching = truth(v)
	}
	if v, ok := get("system-shared-memory"); ok {
		o.systemSharedMemory = truth(v)
	}
	if v, ok := get("max-queue-delay-us"); ok {
		o.maxQueueDelayUs, _ = strconv.Atoi(v)
	}
	if v, ok := get("preferred-batch-sizes"); ok {
		for _, s := range strings.Split(v, ",") {
			if n, err := strconv.Atoi(strings.TrimSpace(s)); err == nil {
				o.preferred = append(o.preferred, n)
			}
		}
	}
	if v, ok := get("batching-models"); ok {
		for _, e := range strings.Split(v, ",") {
			parts := strings.Split(strings.TrimSpace(e), ":")
			if parts[0] == "" {
				continue
			}
			mb := modelBatching{name: parts[0]}
			if len(parts) > 1 && parts[1] != "" {
				n, _ := strconv.Atoi(parts[1])
				mb.delayUs = &n
			}
			if len(parts) > 2 && parts[2] != "" {
				mb.preferred = []int{}
				for _, s := range strings.Split(parts[2], "+") {
					n, _ := strconv.Atoi(s)
					mb.preferred = append(mb.preferred, n)
				}
			}
			o.batchingModels = append(o.batchingModels, mb)
		}
	}
	if v, ok := get("compiled-shapes"); ok {
		o.compiledShapes, _ = strconv.Atoi(v)
	}
	if v, ok := get("cpu-devices"); ok {
		o.cpuDevices, _ = strconv.Atoi(v)
	}
	return o, nil
}

// batchingFor: (delay, preferred) if model is to batch (settings.py batching_for).
func (o *options) batchingFor(model string) (time.Duration, []int, bool, bool) {
	for _, m := range o.batchingModels {
		if m.name == model {
			delay, pref := o.maxQueueDelayUs, o.preferred
			if m.delayUs != nil {
				delay = *m.delayUs
			}
			if m.preferred != nil {
				pref = m.preferred
			}
			return time.Duration(delay) * time.Microsecond, pref, true, true
		}
	}
	if !o.batching {
		return 0, nil, false, false
	}
	return time.Duration(o.maxQueueDelayUs) * time.Microsecond, o.preferred, false, true
}
