// Package conformance reads the language-neutral case files of tests/conformance/cases and runs
// them against any Open Inference Protocol server through the jaxport Go client. The format is
// described in tests/conformance/README.md; the Python and Java runners read the same files.
package conformance

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/jaxport/jaxport/clients/go/jaxport"
)

// KnownRPCs are the case kinds every runner implements.
var KnownRPCs = []string{"ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata", "ModelInfer", "ModelStreamInfer",
	"CudaSharedMemoryStatus", "CudaSharedMemoryRegister", "CudaSharedMemoryUnregister"}

// Ramp is generated data: element i is Start + Step*(i % Modulo), in the tensor's datatype.
type Ramp struct {
	Start  float64 `json:"start"`
	Step   float64 `json:"step"`
	Modulo int64   `json:"modulo"`
}

// TensorSpec is a tensor in a request, an expected output, or a metadata signature entry.
type TensorSpec struct {
	Name     string           `json:"name"`
	Datatype jaxport.Datatype `json:"datatype"`
	Shape    []int64          `json:"shape"`
	Data     string           `json:"data,omitempty"`
	Ramp     *Ramp            `json:"ramp,omitempty"`
	Rtol     float64          `json:"rtol"`
	Atol     float64          `json:"atol"`
	// Strings are the elements of an expected BYTES output (UTF-8 text, row-major).
	Strings []string `json:"strings,omitempty"`
}

// InferRequest is one ModelInfer request as a case describes it.
type InferRequest struct {
	Model    string       `json:"model"`
	Version  string       `json:"version"`
	ID       string       `json:"id"`
	Encoding string       `json:"encoding"` // raw | typed | both (both is a protocol error)
	Inputs   []TensorSpec `json:"inputs"`
	Outputs  []string     `json:"outputs"`
	// Parameters are request parameters (JSON bool, integer or string).
	Parameters map[string]any `json:"parameters"`
	// Classification is the class count requested per output (Triton's "classification").
	Classification map[string]int64 `json:"classification"`
}

// Request is the request part of any case (fields unused by an RPC stay empty).
type Request struct {
	InferRequest
	Requests []InferRequest `json:"requests"` // ModelStreamInfer
	// CUDA shared-memory RPCs.
	Name     string `json:"name"`
	DeviceID int64  `json:"device_id"`
	ByteSize uint64 `json:"byte_size"`
}

// StreamExpect is the expected result of one stream request, matched by id.
type StreamExpect struct {
	ID      string       `json:"id"`
	Outputs []TensorSpec `json:"outputs"`
	// ErrorContains, when set, means this request must fail with an error_message
	// mentioning every string (the stream itself stays open).
	ErrorContains []string `json:"error_contains"`
	// Parameters must be on the response with these values; ParametersAbsent must not be.
	Parameters       map[string]any `json:"parameters"`
	ParametersAbsent []string       `json:"parameters_absent"`
}

// Expect is what the server must answer.
type Expect struct {
	Code              string         `json:"code"`
	MessageContains   []string       `json:"message_contains"`
	Live              *bool          `json:"live"`
	Ready             *bool          `json:"ready"`
	Nonempty          []string       `json:"nonempty"`
	ExtensionsInclude []string       `json:"extensions_include"`
	Name              string         `json:"name"`
	VersionsInclude   []string       `json:"versions_include"`
	Inputs            []TensorSpec   `json:"inputs"`
	Outputs           []TensorSpec   `json:"outputs"`
	ID                *string        `json:"id"`
	ModelName         *string        `json:"model_name"`
	ModelVersion      *string        `json:"model_version"`
	Responses         []StreamExpect `json:"responses"`
	Regions           *[]string      `json:"regions"` // CudaSharedMemoryStatus
	// Alternatives are the other answers the protocol allows (each a whole expectation,
	// judged with its own call; read-only RPCs only): the case passes when one holds.
	Alternatives []Expect `json:"alternatives"`
}

// Case is one case file.
type Case struct {
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Requires    []string `json:"requires"`
	RPC         string   `json:"rpc"`
	Parallel    int      `json:"parallel"`
	// Transport, when set ("grpc" or "rest"), is the one transport the case has a meaning on.
	Transport string `json:"transport"`
	// GRPCCompression sends the ModelInfer request compressed ("gzip" or "deflate").
	GRPCCompression string  `json:"grpc_compression"`
	Request         Request `json:"request"`
	Expect          Expect  `json:"expect"`
	// Dir is the directory the case was read from; data paths are relative to it.
	Dir string `json:"-"`
}

// LoadCases reads every *.json case in dir, sorted by name, and checks each is well formed.
func LoadCases(dir string) ([]Case, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("no case files (*.json) in %s", dir)
	}
	sort.Strings(paths)
	cases := make([]Case, 0, len(paths))
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var c Case
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		if err := dec.Decode(&c); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		c.Dir = dir
		if want := strings.TrimSuffix(filepath.Base(p), ".json"); c.Name != want {
			return nil, fmt.Errorf("%s: name %q does not match the file name", p, c.Name)
		}
		if !known(c.RPC) {
			return nil, fmt.Errorf("%s: unknown rpc %q (known: %v)", p, c.RPC, KnownRPCs)
		}
		if c.Transport != "" && c.Transport != "grpc" && c.Transport != "rest" {
			return nil, fmt.Errorf("%s: unknown transport %q (known: grpc, rest)", p, c.Transport)
		}
		if c.Expect.Code == "" {
			return nil, fmt.Errorf("%s: expect.code is missing", p)
		}
		for i, alt := range c.Expect.Alternatives {
			if alt.Code == "" {
				return nil, fmt.Errorf("%s: expect.alternatives[%d].code is missing", p, i)
			}
		}
		cases = append(cases, c)
	}
	return cases, nil
}

// OtherTransport is why a case does not apply to this runner, which speaks gRPC only (a REST
// case: Content-Encoding, REST shared-memory registration), or "" when it applies.
func OtherTransport(c Case) string {
	if c.Transport == "rest" {
		return "REST only (this runner speaks gRPC)"
	}
	return ""
}

func known(rpc string) bool {
	for _, k := range KnownRPCs {
		if k == rpc {
			return true
		}
	}
	return false
}
