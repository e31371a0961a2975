package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	pb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/grpc"
)

const caseDir = "../../../../tests/conformance/cases"

// yes answers every call successfully: every model is ready, every infer returns one output.
type yes struct {
	pb.UnimplementedGRPCInferenceServiceServer
}

func (yes) ServerLive(context.Context, *pb.ServerLiveRequest) (*pb.ServerLiveResponse, error) {
	return &pb.ServerLiveResponse{Live: true}, nil
}

func (yes) ServerMetadata(context.Context, *pb.ServerMetadataRequest) (*pb.ServerMetadataResponse, error) {
	return &pb.ServerMetadataResponse{Name: "yes", Version: "0"}, nil
}

func (yes) ModelReady(context.Context, *pb.ModelReadyRequest) (*pb.ModelReadyResponse, error) {
	return &pb.ModelReadyResponse{Ready: true}, nil
}

func (yes) ModelMetadata(_ context.Context, r *pb.ModelMetadataRequest) (*pb.ModelMetadataResponse, error) {
	return &pb.ModelMetadataResponse{Name: r.GetName(), Versions: []string{"1"}}, nil
}

func (yes) ModelInfer(_ context.Context, r *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	return &pb.ModelInferResponse{
		ModelName: r.GetModelName(), ModelVersion: "1", Id: r.GetId(),
		Outputs:           []*pb.ModelInferResponse_InferOutputTensor{{Name: "data_out", Datatype: "FP32", Shape: []int64{1}}},
		RawOutputContents: [][]byte{{0, 0, 0, 0}},
	}, nil
}

func (yes) CudaSharedMemoryRegister(context.Context, *pb.CudaSharedMemoryRegisterRequest) (*pb.CudaSharedMemoryRegisterResponse, error) {
	return &pb.CudaSharedMemoryRegisterResponse{}, nil
}

func (yes) CudaSharedMemoryStatus(context.Context, *pb.CudaSharedMemoryStatusRequest) (*pb.CudaSharedMemoryStatusResponse, error) {
	return &pb.CudaSharedMemoryStatusResponse{Regions: map[string]*pb.CudaSharedMemoryStatusResponse_RegionStatus{"ghost": {Name: "ghost"}}}, nil
}

func yesServer(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	pb.RegisterGRPCInferenceServiceServer(s, yes{})
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	rc := run(args, &out, &errOut)
	return rc, out.String(), errOut.String()
}

// A call that succeeds where the case expects an error status is a FAIL saying so.
func TestUnexpectedSuccessIsAFailure(t *testing.T) {
	url := yesServer(t)
	for _, tc := range []struct{ run, line string }{
		// the protocol allows NOT_FOUND or ready=false: ready=true is neither
		{"error_model_ready_unknown", "FAIL error_model_ready_unknown: call succeeded (ready=true), expected status NOT_FOUND | or: model ready is true, expected false"},
		{"error_unknown_version", `FAIL error_unknown_version: call succeeded (model "cf_fp32" version "1", outputs [data_out]), expected status NOT_FOUND`},
		{"metadata_unknown_model", `FAIL metadata_unknown_model: call succeeded (name="conformance_no_such_model" versions=[1]), expected status NOT_FOUND`},
		{"error_raw_and_typed", `FAIL error_raw_and_typed: call succeeded (model "cf_fp32" version "1", outputs [data_out]), expected status INVALID_ARGUMENT`},
		{"cuda_shm_register_refused", "FAIL cuda_shm_register_refused: call succeeded (CudaSharedMemoryRegister answered (regions [])), expected status INVALID_ARGUMENT"},
		{"cuda_shm_status_empty", "FAIL cuda_shm_status_empty: regions [ghost], expected []"},
	} {
		rc, out, errOut := runCmd(t, "--url", url, "--cases", caseDir, "--run", tc.run)
		if rc != 1 || !strings.Contains(out, tc.line+"\n") || !strings.Contains(out, "conformance go: 0 passed, 1 failed") {
			t.Errorf("%s: rc %d, output:\n%s%s\nwant the line %q", tc.run, rc, out, errOut, tc.line)
		}
	}
	rc, out, _ := runCmd(t, "--url", url, "--cases", caseDir, "--run", "health_server_live")
	if rc != 0 || !strings.Contains(out, "PASS health_server_live") {
		t.Errorf("health_server_live: rc %d, output:\n%s", rc, out)
	}
}

// The feature table is read from beside the case directory (one table for every runner).
func TestFeatureTableBesideTheCases(t *testing.T) {
	url := yesServer(t)
	dir := t.TempDir()
	cases := filepath.Join(dir, "cases")
	if err := os.MkdirAll(cases, 0o755); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(caseDir, "health_server_live.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cases, "health_server_live.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	table := `{"features": {"only-in-this-table": "x"}, "extensions": {}}`
	if err := os.WriteFile(filepath.Join(dir, "features.json"), []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	rc, out, errOut := runCmd(t, "--url", url, "--cases", cases, "--features", "only-in-this-table")
	if rc != 0 || !strings.Contains(out, "features claimed: only-in-this-table\n") {
		t.Errorf("rc %d, output:\n%s%s", rc, out, errOut)
	}
	if err := os.Remove(filepath.Join(dir, "features.json")); err != nil {
		t.Fatal(err)
	}
	rc, _, errOut = runCmd(t, "--url", url, "--cases", cases)
	if rc != 2 || !strings.Contains(errOut, "features.json") {
		t.Errorf("without the table: rc %d, stderr %s", rc, errOut)
	}
}

// Cases needing a feature the server does not claim are N/A, not failures.
func TestFeaturesNotClaimedAreNotApplicable(t *testing.T) {
	url := yesServer(t)
	rc, out, _ := runCmd(t, "--url", url, "--cases", caseDir, "--run", "error_", "--features", "core")
	if rc != 1 || !strings.Contains(out, "N/A error_unknown_version (needs jaxport-models, versions)\n") ||
		!strings.Contains(out, "FAIL error_model_ready_unknown: call succeeded") ||
		!strings.Contains(out, "conformance go: 0 passed, 2 failed, ") {
		t.Errorf("rc %d, output:\n%s", rc, out)
	}
	rc, _, errOut := runCmd(t, "--url", url, "--cases", caseDir, "--features", "versions,nonsense")
	if rc != 2 || !strings.Contains(errOut, "unknown feature(s) [nonsense]") {
		t.Errorf("rc %d, stderr %s", rc, errOut)
	}
}

// --junit and --json carry the text report's counts: FAILs as <failure>, N/As as <skipped>.
func TestJUnitAndJSONMatchTheTextReport(t *testing.T) {
	url := yesServer(t)
	dir := t.TempDir()
	junit, report := filepath.Join(dir, "out.xml"), filepath.Join(dir, "out.json")
	rc, out, errOut := runCmd(t, "--url", url, "--cases", caseDir, "--run", "error_", "--features", "core",
		"--junit", junit, "--json", report)
	if rc != 1 || !strings.Contains(out, "conformance go: 0 passed, 2 failed, ") {
		t.Fatalf("rc %d, output:\n%s%s", rc, out, errOut)
	}
	var doc struct {
		Suite struct {
			Tests    int `xml:"tests,attr"`
			Failures int `xml:"failures,attr"`
			Skipped  int `xml:"skipped,attr"`
			Cases    []struct {
				Name    string    `xml:"name,attr"`
				Failure *struct{} `xml:"failure"`
				Skipped *struct{} `xml:"skipped"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	raw, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%v in\n%s", err, raw)
	}
	lines := strings.Count(out, "\nFAIL ") + strings.Count(out, "\nN/A ") + strings.Count(out, "\nPASS ")
	if doc.Suite.Failures != 2 || doc.Suite.Tests != lines || doc.Suite.Skipped != lines-2 || len(doc.Suite.Cases) != lines {
		t.Errorf("junit tests %d failures %d skipped %d, text lines %d:\n%s", doc.Suite.Tests, doc.Suite.Failures,
			doc.Suite.Skipped, lines, raw)
	}
	var js struct {
		Passed, Failed int
		NA             int `json:"not_applicable"`
	}
	raw, err = os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &js); err != nil || js.Failed != 2 || js.NA != lines-2 || js.Passed != 0 {
		t.Errorf("json %+v (%v):\n%s", js, err, raw)
	}
}

// A profile file names the claimed features; REST is refused naming the runner that has it.
func TestProfileFileAndTransport(t *testing.T) {
	url := yesServer(t)
	profile := filepath.Join(t.TempDir(), "profile.txt")
	if err := os.WriteFile(profile, []byte("# my server\nversions, bf16\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rc, out, errOut := runCmd(t, "--url", url, "--cases", caseDir, "--run", "health_server_live", "--features", profile)
	if rc != 0 || !strings.Contains(out, "features claimed: bf16, versions\n") {
		t.Errorf("rc %d, output:\n%s%s", rc, out, errOut)
	}
	if err := os.WriteFile(profile, []byte("versions\nnonsense\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rc, _, errOut = runCmd(t, "--url", url, "--cases", caseDir, "--features", profile)
	if rc != 2 || !strings.Contains(errOut, "unknown feature(s) [nonsense]") {
		t.Errorf("rc %d, stderr %s", rc, errOut)
	}
	rc, _, errOut = runCmd(t, "--url", url, "--cases", caseDir, "--transport", "rest")
	if rc != 2 || !strings.Contains(errOut, `--transport "rest"`) || !strings.Contains(errOut, "jaxport-conformance --transport rest") {
		t.Errorf("rc %d, stderr %s", rc, errOut)
	}
	rc, _, errOut = runCmd(t, "--url", url, "--cases", filepath.Join(t.TempDir(), "absent"))
	if rc != 2 || !strings.Contains(errOut, "no case directory") || !strings.Contains(errOut, "absent") {
		t.Errorf("rc %d, stderr %s", rc, errOut)
	}
}

// The compression cases send their request with grpc-encoding gzip and deflate (the server
// reads both: deflate is the runner's zlib compressor), and the REST-only cases are N/A.
func TestCompressionCasesCompress(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	record := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if s, ok := grpc.ServerTransportStreamFromContext(ctx).(interface{ RecvCompress() string }); ok && info.FullMethod == "/inference.GRPCInferenceService/ModelInfer" {
			mu.Lock()
			seen = append(seen, s.RecvCompress())
			mu.Unlock()
		}
		return h(ctx, req)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.UnaryInterceptor(record))
	pb.RegisterGRPCInferenceServiceServer(s, yes{})
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	rc, out, errOut := runCmd(t, "--url", lis.Addr().String(), "--cases", caseDir, "--run", "infer_grpc_compression")
	if rc != 1 || !strings.Contains(out, "conformance go: 0 passed, 2 failed") {
		t.Fatalf("rc %d (the fake's outputs are wrong: both must run and fail)\n%s%s", rc, out, errOut)
	}
	sort.Strings(seen)
	if strings.Join(seen, ",") != "deflate,gzip" {
		t.Fatalf("server received encodings %v, expected deflate and gzip", seen)
	}
	_, out, _ = runCmd(t, "--url", lis.Addr().String(), "--cases", caseDir, "--run", "rest_system_shm_infer")
	if !strings.Contains(out, "N/A rest_system_shm_infer (REST only (this runner speaks gRPC))") {
		t.Fatalf("REST case not N/A:\n%s", out)
	}
}
