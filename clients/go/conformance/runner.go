package conformance

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	pb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"github.com/jaxport/jaxport/clients/go/jaxport"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// codeNames are the canonical (proto enum) names the case files use for status codes.
var codeNames = map[codes.Code]string{
	codes.OK: "OK", codes.Canceled: "CANCELLED", codes.Unknown: "UNKNOWN",
	codes.InvalidArgument: "INVALID_ARGUMENT", codes.DeadlineExceeded: "DEADLINE_EXCEEDED",
	codes.NotFound: "NOT_FOUND", codes.AlreadyExists: "ALREADY_EXISTS",
	codes.PermissionDenied: "PERMISSION_DENIED", codes.ResourceExhausted: "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION", codes.Aborted: "ABORTED",
	codes.OutOfRange: "OUT_OF_RANGE", codes.Unimplemented: "UNIMPLEMENTED",
	codes.Internal: "INTERNAL", codes.Unavailable: "UNAVAILABLE", codes.DataLoss: "DATA_LOSS",
	codes.Unauthenticated: "UNAUTHENTICATED",
}

// CodeName is the canonical name of err's gRPC status code ("OK" for nil).
func CodeName(err error) string {
	return codeNames[status.Code(err)]
}

// Runner runs cases against one server.
type Runner struct {
	Client *jaxport.Client
}

// TensorBytes is the little-endian payload a case tensor describes (data file or ramp).
func TensorBytes(c Case, t TensorSpec) ([]byte, error) {
	switch {
	case t.Data != "":
		n, err := ReadNpy(filepath.Join(c.Dir, filepath.FromSlash(t.Data)))
		if err != nil {
			return nil, err
		}
		return n.Data, nil
	case t.Ramp != nil:
		return rampBytes(*t.Ramp, t.Datatype, numElements(t.Shape))
	}
	return nil, fmt.Errorf("case %s: tensor %s has neither data nor ramp", c.Name, t.Name)
}

func numElements(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

func rampBytes(r Ramp, datatype jaxport.Datatype, count int64) ([]byte, error) {
	if r.Modulo <= 0 {
		return nil, fmt.Errorf("ramp modulo must be positive, got %d", r.Modulo)
	}
	values := make([]float32, count)
	for i := range values {
		values[i] = float32(r.Start + r.Step*float64(int64(i)%r.Modulo))
	}
	switch datatype {
	case jaxport.FP32:
		t, err := jaxport.Float32("", []int64{count}, values)
		return t.Raw, err
	case jaxport.BF16:
		t, err := jaxport.BFloat16("", []int64{count}, values)
		return t.Raw, err
	case jaxport.FP16:
		t, err := jaxport.Float16("", []int64{count}, values)
		return t.Raw, err
	}
	return nil, fmt.Errorf("ramp data is defined for FP32/FP16/BF16, not %s", datatype)
}

// Run executes one case; nil means the server answered as the case expects. A call that
// succeeds where the case expects an error status fails with "call succeeded (...), expected
// status X": the answer is described, never compared with outputs the case does not have.
func (r *Runner) Run(ctx context.Context, c Case) error {
	err := r.runOne(ctx, c)
	if err == nil || len(c.Expect.Alternatives) == 0 {
		return err
	}
	// Where the protocol allows several answers, any one of them passes.
	msgs := []string{err.Error()}
	for _, alt := range c.Expect.Alternatives {
		other := c
		other.Expect = alt
		altErr := r.runOne(ctx, other)
		if altErr == nil {
			return nil
		}
		msgs = append(msgs, altErr.Error())
	}
	return fail("%s", strings.Join(msgs, " | or: "))
}

// runOne judges the answer against one expectation (c.Expect).
func (r *Runner) runOne(ctx context.Context, c Case) error {
	want := c.Expect.Code
	if want == "OK" {
		err := r.call(ctx, c)
		var failure *Failure
		if errors.As(err, &failure) {
			return err
		}
		if _, isStatus := status.FromError(err); err != nil && isStatus {
			return fmt.Errorf("status %s: %w", CodeName(err), err)
		}
		return err
	}
	answer, err := r.callOnly(ctx, c)
	if err == nil {
		return fail("call succeeded (%s), expected status %s", answer, want)
	}
	if _, isStatus := status.FromError(err); !isStatus {
		return err
	}
	got := CodeName(err)
	msg := status.Convert(err).Message()
	if got != want {
		return fmt.Errorf("status %s (%q), expected %s", got, msg, want)
	}
	for _, part := range c.Expect.MessageContains {
		if !strings.Contains(msg, part) {
			return fmt.Errorf("status message %q does not mention %q", msg, part)
		}
	}
	return nil
}

// Failure is a mismatch found in a successful answer (never a transport status).
type Failure struct{ msg string }

func (f *Failure) Error() string { return f.msg }

func fail(format string, args ...any) error { return &Failure{fmt.Sprintf(format, args...)} }

// callOnly makes the case's call without judging the answer, and describes what came back.
func (r *Runner) callOnly(ctx context.Context, c Case) (string, error) {
	req := c.Request
	switch c.RPC {
	case "ServerLive":
		live, err := r.Client.Live(ctx)
		return fmt.Sprintf("live=%v", live), err
	case "ServerReady":
		ready, err := r.Client.Ready(ctx)
		return fmt.Sprintf("ready=%v", ready), err
	case "ModelReady":
		ready, err := r.Client.ModelReady(ctx, req.Model, req.Version)
		return fmt.Sprintf("ready=%v", ready), err
	case "ServerMetadata":
		meta, err := r.Client.ServerMetadata(ctx)
		return fmt.Sprintf("name=%q", meta.GetName()), err
	case "ModelMetadata":
		meta, err := r.Client.MetadataVersion(ctx, req.Model, req.Version)
		return fmt.Sprintf("name=%q versions=%v", meta.GetName(), meta.GetVersions()), err
	case "ModelInfer":
		out, err := r.infer(ctx, c, req.InferRequest)
		if err != nil {
			return "", err
		}
		var names []string
		for _, t := range out.Tensors {
			names = append(names, t.Name)
		}
		sort.Strings(names)
		return fmt.Sprintf("model %q version %q, outputs %v", out.Model, out.Version, names), nil
	case "ModelStreamInfer":
		if err := r.stream(ctx, c); err != nil {
			var failure *Failure
			if !errors.As(err, &failure) {
				return "", err
			}
		}
		return "stream answered", nil
	case "CudaSharedMemoryStatus", "CudaSharedMemoryRegister", "CudaSharedMemoryUnregister":
		regions, err := r.cuda(ctx, c.RPC, req)
		return fmt.Sprintf("%s answered (regions %v)", c.RPC, regions), err
	}
	return "", fmt.Errorf("unknown rpc %q", c.RPC)
}

func (r *Runner) call(ctx context.Context, c Case) error {
	e := c.Expect
	req := c.Request
	switch c.RPC {
	case "ServerLive":
		live, err := r.Client.Live(ctx)
		if err == nil && e.Live != nil && live != *e.Live {
			return fail("live is %v, expected %v", live, *e.Live)
		}
		return err
	case "ServerReady":
		ready, err := r.Client.Ready(ctx)
		if err == nil && e.Ready != nil && ready != *e.Ready {
			return fail("ready is %v, expected %v", ready, *e.Ready)
		}
		return err
	case "ModelReady":
		ready, err := r.Client.ModelReady(ctx, req.Model, req.Version)
		if err == nil && e.Ready != nil && ready != *e.Ready {
			return fail("model ready is %v, expected %v", ready, *e.Ready)
		}
		return err
	case "ServerMetadata":
		meta, err := r.Client.ServerMetadata(ctx)
		if err != nil {
			return err
		}
		fields := map[string]string{"name": meta.GetName(), "version": meta.GetVersion()}
		for _, f := range e.Nonempty {
			if fields[f] == "" {
				return fail("server metadata field %s is empty", f)
			}
		}
		for _, x := range e.ExtensionsInclude {
			if !contains(meta.GetExtensions(), x) {
				return fail("extensions %v lack %q", meta.GetExtensions(), x)
			}
		}
		return nil
	case "ModelMetadata":
		meta, err := r.Client.MetadataVersion(ctx, req.Model, req.Version)
		if err != nil {
			return err
		}
		if meta.GetName() != e.Name {
			return fail("name %q, expected %q", meta.GetName(), e.Name)
		}
		for _, v := range e.VersionsInclude {
			if !contains(meta.GetVersions(), v) {
				return fail("versions %v lack %q", meta.GetVersions(), v)
			}
		}
		if err := sameSignature("inputs", meta.GetInputs(), e.Inputs); err != nil {
			return err
		}
		return sameSignature("outputs", meta.GetOutputs(), e.Outputs)
	case "ModelInfer":
		n := c.Parallel
		if n <= 1 {
			return r.inferAndCompare(ctx, c, req.InferRequest, e.Outputs, e.ID)
		}
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				errs[i] = r.inferAndCompare(ctx, c, req.InferRequest, e.Outputs, e.ID)
			}(i)
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				return fmt.Errorf("parallel request %d of %d: %w", i+1, n, err)
			}
		}
		return nil
	case "ModelStreamInfer":
		return r.stream(ctx, c)
	case "CudaSharedMemoryStatus", "CudaSharedMemoryRegister", "CudaSharedMemoryUnregister":
		regions, err := r.cuda(ctx, c.RPC, req)
		if err != nil {
			return err
		}
		if e.Regions != nil {
			want := append([]string(nil), (*e.Regions)...)
			sort.Strings(want)
			if strings.Join(regions, ",") != strings.Join(want, ",") {
				return fail("regions %v, expected %v", regions, want)
			}
		}
		return nil
	}
	return fmt.Errorf("unknown rpc %q", c.RPC)
}

// cuda makes one CUDA shared-memory RPC through the generated stub; the region names a
// status lists (sorted), nil for the others.
func (r *Runner) cuda(ctx context.Context, rpc string, req Request) ([]string, error) {
	raw := r.Client.Raw()
	switch rpc {
	case "CudaSharedMemoryStatus":
		resp, err := raw.CudaSharedMemoryStatus(ctx, &pb.CudaSharedMemoryStatusRequest{Name: req.Name})
		if err != nil {
			return nil, err
		}
		names := []string{}
		for name := range resp.GetRegions() {
			names = append(names, name)
		}
		sort.Strings(names)
		return names, nil
	case "CudaSharedMemoryRegister":
		_, err := raw.CudaSharedMemoryRegister(ctx, &pb.CudaSharedMemoryRegisterRequest{
			Name: req.Name, DeviceId: req.DeviceID, ByteSize: req.ByteSize})
		return nil, err
	case "CudaSharedMemoryUnregister":
		_, err := raw.CudaSharedMemoryUnregister(ctx, &pb.CudaSharedMemoryUnregisterRequest{Name: req.Name})
		return nil, err
	}
	return nil, fmt.Errorf("unknown rpc %q", rpc)
}

// parameter converts a case's JSON parameter value (bool, integer or string).
func parameter(key string, v any) (*pb.InferParameter, error) {
	switch x := v.(type) {
	case bool:
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: x}}, nil
	case float64:
		if x == math.Trunc(x) {
			return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: int64(x)}}, nil
		}
	case string:
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: x}}, nil
	}
	return nil, fmt.Errorf("parameter %q: %v is not a bool, an integer or a string", key, v)
}

// requestProto is the wire request of a case request: the client's request plus what the
// client does not send (request parameters, requested outputs' classification counts).
func requestProto(req jaxport.Request, ir InferRequest) (*pb.ModelInferRequest, error) {
	msg, err := req.Proto()
	if err != nil {
		return nil, err
	}
	for key, v := range ir.Parameters {
		p, err := parameter(key, v)
		if err != nil {
			return nil, err
		}
		if msg.Parameters == nil {
			msg.Parameters = map[string]*pb.InferParameter{}
		}
		msg.Parameters[key] = p
	}
	for _, out := range msg.Outputs {
		if k, ok := ir.Classification[out.Name]; ok {
			out.Parameters = map[string]*pb.InferParameter{
				"classification": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: k}}}
		}
	}
	return msg, nil
}

// sameParameters checks a response's parameters against a stream expectation.
func sameParameters(id string, want StreamExpect, got map[string]*pb.InferParameter) error {
	for key, v := range want.Parameters {
		w, err := parameter(key, v)
		if err != nil {
			return err
		}
		g, ok := got[key]
		if !ok {
			return fail("stream response %q: parameter %q is (absent), expected %v", id, key, v)
		}
		if fmt.Sprint(g.GetParameterChoice()) != fmt.Sprint(w.GetParameterChoice()) {
			return fail("stream response %q: parameter %q is %v, expected %v", id, key, parameterValue(g), v)
		}
	}
	for _, key := range want.ParametersAbsent {
		if g, ok := got[key]; ok {
			return fail("stream response %q: parameter %q is %v, expected none", id, key, parameterValue(g))
		}
	}
	return nil
}

// parameterValue is the plain value of an InferParameter (bool, int64 or string).
func parameterValue(p *pb.InferParameter) any {
	switch c := p.GetParameterChoice().(type) {
	case *pb.InferParameter_BoolParam:
		return c.BoolParam
	case *pb.InferParameter_Int64Param:
		return c.Int64Param
	case *pb.InferParameter_StringParam:
		return c.StringParam
	}
	return nil
}

func contains(list []string, x string) bool {
	for _, v := range list {
		if v == x {
			return true
		}
	}
	return false
}

func sameSignature(kind string, got []*pb.ModelMetadataResponse_TensorMetadata, want []TensorSpec) error {
	render := func(name, dt string, shape []int64) string { return fmt.Sprintf("%s:%s%v", name, dt, shape) }
	var g, w []string
	for _, t := range got {
		g = append(g, render(t.GetName(), t.GetDatatype(), t.GetShape()))
	}
	for _, t := range want {
		w = append(w, render(t.Name, string(t.Datatype), t.Shape))
	}
	if strings.Join(g, " ") != strings.Join(w, " ") {
		return fail("%s %v, expected %v", kind, g, w)
	}
	return nil
}

// buildRequest turns a case request into the wrapper's Request (raw or typed encoding).
func buildRequest(c Case, ir InferRequest) (jaxport.Request, error) {
	out := jaxport.Request{Model: ir.Model, Version: ir.Version, ID: ir.ID, Outputs: ir.Outputs, Typed: ir.Encoding == "typed"}
	for _, t := range ir.Inputs {
		data, err := TensorBytes(c, t)
		if err != nil {
			return out, err
		}
		out.Inputs = append(out.Inputs, jaxport.RawTensor(t.Name, t.Datatype, t.Shape, data))
	}
	return out, nil
}

func (r *Runner) infer(ctx context.Context, c Case, ir InferRequest) (jaxport.Outputs, error) {
	req, err := buildRequest(c, ir)
	if err != nil {
		return jaxport.Outputs{}, err
	}
	opts, err := callOptions(c)
	if err != nil {
		return jaxport.Outputs{}, err
	}
	switch ir.Encoding {
	case "raw", "typed":
		if len(ir.Parameters) == 0 && len(ir.Classification) == 0 && len(opts) == 0 {
			return r.Client.Do(ctx, req)
		}
		// Request parameters, requested-output parameters and compression: the generated stub.
		msg, err := requestProto(req, ir)
		if err != nil {
			return jaxport.Outputs{}, err
		}
		resp, err := r.Client.Raw().ModelInfer(ctx, msg, opts...)
		if err != nil {
			return jaxport.Outputs{}, err
		}
		return jaxport.DecodeResponse(resp)
	case "both":
		// Deliberately invalid: raw bytes AND typed contents for the same tensors.
		msg, err := req.Proto()
		if err != nil {
			return jaxport.Outputs{}, err
		}
		for i, t := range req.Inputs {
			if msg.Inputs[i].Contents, err = t.TypedContents(); err != nil {
				return jaxport.Outputs{}, err
			}
		}
		resp, err := r.Client.Raw().ModelInfer(ctx, msg, opts...)
		if err != nil {
			return jaxport.Outputs{}, err
		}
		return jaxport.DecodeResponse(resp)
	}
	return jaxport.Outputs{}, fmt.Errorf("unknown encoding %q", ir.Encoding)
}

func (r *Runner) inferAndCompare(ctx context.Context, c Case, ir InferRequest, want []TensorSpec, wantID *string) error {
	out, err := r.infer(ctx, c, ir)
	if err != nil {
		return err
	}
	if m := c.Expect.ModelName; m != nil && out.Model != *m {
		return fail("response model_name %q, expected %q", out.Model, *m)
	}
	if v := c.Expect.ModelVersion; v != nil && out.Version != *v {
		return fail("response model_version %q, expected %q", out.Version, *v)
	}
	return compareOutputs(c, out, want, wantID)
}

func compareOutputs(c Case, out jaxport.Outputs, want []TensorSpec, wantID *string) error {
	var got, exp []string
	for _, t := range out.Tensors {
		got = append(got, t.Name)
	}
	for _, t := range want {
		exp = append(exp, t.Name)
	}
	sort.Strings(got)
	sort.Strings(exp)
	if strings.Join(got, ",") != strings.Join(exp, ",") {
		return fail("outputs %v, expected %v", got, exp)
	}
	for _, spec := range want {
		t, _ := out.Get(spec.Name)
		if spec.Datatype == "BYTES" {
			if err := CompareStrings(spec, t); err != nil {
				return err
			}
			continue
		}
		data, err := TensorBytes(c, spec)
		if err != nil {
			return err
		}
		if err := CompareTensor(spec, t, data); err != nil {
			return err
		}
	}
	if wantID != nil && out.ID != *wantID {
		return fail("response id %q, expected %q", out.ID, *wantID)
	}
	return nil
}

// CompareStrings checks an expected BYTES output: shape, then every element (raw contents:
// each a 4-byte little-endian length, then its bytes) equal to the expected text.
func CompareStrings(spec TensorSpec, got jaxport.Tensor) error {
	if got.Datatype != "BYTES" {
		return fail("output %s: datatype %s, expected BYTES", spec.Name, got.Datatype)
	}
	if fmt.Sprint(got.Shape) != fmt.Sprint(spec.Shape) {
		return fail("output %s: shape %v, expected %v", spec.Name, got.Shape, spec.Shape)
	}
	var elements []string
	for rest := got.Raw; len(rest) > 0; {
		if len(rest) < 4 {
			return fail("output %s: %d trailing bytes are not a length prefix", spec.Name, len(rest))
		}
		n := binary.LittleEndian.Uint32(rest)
		if uint64(len(rest)-4) < uint64(n) {
			return fail("output %s: element %d claims %d bytes, %d left", spec.Name, len(elements), n, len(rest)-4)
		}
		elements = append(elements, string(rest[4:4+n]))
		rest = rest[4+n:]
	}
	if len(elements) != len(spec.Strings) {
		return fail("output %s: %d elements, expected %d", spec.Name, len(elements), len(spec.Strings))
	}
	for i, want := range spec.Strings {
		if elements[i] != want {
			return fail("output %s: flat index %d: got %q, expected %q", spec.Name, i, elements[i], want)
		}
	}
	return nil
}

// CompareTensor checks datatype and shape, then values: byte-exact for integers and BOOL,
// |got-want| <= atol + rtol*|want| for floats (NaN equals NaN).
func CompareTensor(spec TensorSpec, got jaxport.Tensor, wantBytes []byte) error {
	if got.Datatype != spec.Datatype {
		return fail("output %s: datatype %s, expected %s", spec.Name, got.Datatype, spec.Datatype)
	}
	if fmt.Sprint(got.Shape) != fmt.Sprint(spec.Shape) && !(len(got.Shape) == 0 && len(spec.Shape) == 0) {
		return fail("output %s: shape %v, expected %v", spec.Name, got.Shape, spec.Shape)
	}
	if err := got.Validate(); err != nil {
		return fail("output %s: %v", spec.Name, err)
	}
	want := jaxport.RawTensor(spec.Name, spec.Datatype, spec.Shape, wantBytes)
	if err := want.Validate(); err != nil {
		return fmt.Errorf("expected data of %s: %w", spec.Name, err)
	}
	switch spec.Datatype {
	case jaxport.FP16, jaxport.BF16, jaxport.FP32, jaxport.FP64:
		g, _ := got.AsFloat64Any()
		w, _ := want.AsFloat64Any()
		bad, first := 0, -1
		for i := range w {
			if g[i] == w[i] || (math.IsNaN(w[i]) && math.IsNaN(g[i])) {
				continue // equal infinities have an infinite difference
			}
			if math.IsInf(g[i], 0) || math.IsInf(w[i], 0) || !(math.Abs(g[i]-w[i]) <= spec.Atol+spec.Rtol*math.Abs(w[i])) {
				bad++
				if first < 0 {
					first = i
				}
			}
		}
		if bad > 0 {
			return fail("output %s: %d elements outside rtol=%g atol=%g; first at flat index %d: got %v, expected %v",
				spec.Name, bad, spec.Rtol, spec.Atol, first, g[first], w[first])
		}
	case jaxport.BOOL:
		for i := range wantBytes {
			if (got.Raw[i] != 0) != (wantBytes[i] != 0) {
				return fail("output %s: flat index %d: got %v, expected %v", spec.Name, i, got.Raw[i] != 0, wantBytes[i] != 0)
			}
		}
	default:
		if !bytes.Equal(got.Raw, wantBytes) {
			g, _ := got.AsFloat64Any()
			w, _ := want.AsFloat64Any()
			for i := range w {
				if g[i] != w[i] {
					return fail("output %s: flat index %d: got %v, expected %v", spec.Name, i, g[i], w[i])
				}
			}
			return fail("output %s: bytes differ", spec.Name)
		}
	}
	return nil
}

// streamRaw runs a stream whose requests carry their own parameters through the generated
// stub, each request exactly as the case describes it; responses are matched by id.
func (r *Runner) streamRaw(ctx context.Context, c Case) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := r.Client.Raw().ModelStreamInfer(ctx)
	if err != nil {
		return err
	}
	for _, ir := range c.Request.Requests {
		req, err := buildRequest(c, ir)
		if err != nil {
			return err
		}
		msg, err := requestProto(req, ir)
		if err != nil {
			return err
		}
		if err := s.Send(msg); err != nil {
			return err
		}
	}
	if err := s.CloseSend(); err != nil {
		return err
	}
	byID := map[string]*pb.ModelInferResponse{}
	for range c.Request.Requests {
		resp, err := s.Recv()
		if err != nil {
			return err
		}
		if msg := resp.GetErrorMessage(); msg != "" {
			return fail("stream request %q failed: %s", resp.GetInferResponse().GetId(), msg)
		}
		byID[resp.GetInferResponse().GetId()] = resp.GetInferResponse()
	}
	for _, want := range c.Expect.Responses {
		resp, ok := byID[want.ID]
		if !ok {
			return fail("no stream response for request %q", want.ID)
		}
		out, err := jaxport.DecodeResponse(resp)
		if err != nil {
			return err
		}
		id := want.ID
		if err := compareOutputs(c, out, want.Outputs, &id); err != nil {
			return err
		}
		if err := sameParameters(want.ID, want, resp.GetParameters()); err != nil {
			return err
		}
	}
	return nil
}

func (r *Runner) stream(ctx context.Context, c Case) error {
	for _, ir := range c.Request.Requests {
		if len(ir.Parameters) > 0 {
			return r.streamRaw(ctx, c)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := r.Client.OpenStream(ctx)
	if err != nil {
		return err
	}
	for _, ir := range c.Request.Requests {
		req, err := buildRequest(c, ir)
		if err != nil {
			return err
		}
		if err := s.Send(req); err != nil {
			return err
		}
	}
	if err := s.CloseSend(); err != nil {
		return err
	}
	byID := map[string]jaxport.Outputs{}
	errByID := map[string]string{}
	for range c.Request.Requests {
		out, err := s.Recv()
		if err != nil {
			var se *jaxport.StreamError
			if !errors.As(err, &se) {
				return err
			}
			errByID[se.ID] = se.Error() // "CODE: message", as the server worded it
			continue
		}
		byID[out.ID] = out
	}
	for _, want := range c.Expect.Responses {
		if msg, failed := errByID[want.ID]; failed || len(want.ErrorContains) > 0 {
			if !failed {
				return fail("stream request %q succeeded, expected an error_message", want.ID)
			}
			if len(want.ErrorContains) == 0 {
				return fail("stream request %q failed: %s", want.ID, msg)
			}
			for _, part := range want.ErrorContains {
				if !strings.Contains(msg, part) {
					return fail("stream error %q does not mention %q", msg, part)
				}
			}
			continue
		}
		out, ok := byID[want.ID]
		if !ok {
			return fail("no stream response for request %q", want.ID)
		}
		id := want.ID
		if err := compareOutputs(c, out, want.Outputs, &id); err != nil {
			return err
		}
	}
	return nil
}
