package dev.jaxport.conformance;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.ByteString;
import dev.jaxport.inference.GRPCInferenceServiceGrpc;
import dev.jaxport.inference.ModelInferRequest;
import dev.jaxport.inference.ModelInferResponse;
import dev.jaxport.inference.ModelMetadataRequest;
import dev.jaxport.inference.ModelMetadataResponse;
import dev.jaxport.inference.ModelReadyRequest;
import dev.jaxport.inference.ModelReadyResponse;
import dev.jaxport.inference.ServerLiveRequest;
import dev.jaxport.inference.ServerLiveResponse;
import dev.jaxport.inference.ServerMetadataRequest;
import dev.jaxport.inference.ServerMetadataResponse;
import io.grpc.Server;
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.stub.StreamObserver;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The runner against a deliberately wrong server that answers every call successfully: a call
 * that succeeds where the case expects an error status is a FAIL with a clear line and a non-zero
 * result, and cases needing features the server does not claim are N/A.
 */
class UnexpectedSuccessTest {
  static final String CASES = "../../tests/conformance/cases";
  static Server server;
  static String url;

  /** Every model is ready, every infer returns one FP32[1] output. */
  static final class Yes extends GRPCInferenceServiceGrpc.GRPCInferenceServiceImplBase {
    @Override
    public void serverLive(ServerLiveRequest r, StreamObserver<ServerLiveResponse> o) {
      o.onNext(ServerLiveResponse.newBuilder().setLive(true).build());
      o.onCompleted();
    }

    @Override
    public void serverMetadata(ServerMetadataRequest r, StreamObserver<ServerMetadataResponse> o) {
      o.onNext(ServerMetadataResponse.newBuilder().setName("yes").setVersion("0").build());
      o.onCompleted();
    }

    @Override
    public void modelReady(ModelReadyRequest r, StreamObserver<ModelReadyResponse> o) {
      o.onNext(ModelReadyResponse.newBuilder().setReady(true).build());
      o.onCompleted();
    }

    @Override
    public void modelMetadata(ModelMetadataRequest r, StreamObserver<ModelMetadataResponse> o) {
      o.onNext(ModelMetadataResponse.newBuilder().setName(r.getName()).addVersions("1").build());
      o.onCompleted();
    }

    @Override
    public void modelInfer(ModelInferRequest r, StreamObserver<ModelInferResponse> o) {
      o.onNext(ModelInferResponse.newBuilder().setModelName(r.getModelName()).setModelVersion("1")
          .setId(r.getId())
          .addOutputs(ModelInferResponse.InferOutputTensor.newBuilder().setName("data_out")
              .setDatatype("FP32").addShape(1))
          .addRawOutputContents(ByteString.copyFrom(new byte[4])).build());
      o.onCompleted();
    }

    @Override
    public void cudaSharedMemoryRegister(dev.jaxport.inference.CudaSharedMemoryRegisterRequest r,
        StreamObserver<dev.jaxport.inference.CudaSharedMemoryRegisterResponse> o) {
      o.onNext(dev.jaxport.inference.CudaSharedMemoryRegisterResponse.getDefaultInstance());
      o.onCompleted();
    }

    @Override
    public void cudaSharedMemoryStatus(dev.jaxport.inference.CudaSharedMemoryStatusRequest r,
        StreamObserver<dev.jaxport.inference.CudaSharedMemoryStatusResponse> o) {
      o.onNext(dev.jaxport.inference.CudaSharedMemoryStatusResponse.newBuilder().putRegions("ghost",
          dev.jaxport.inference.CudaSharedMemoryStatusResponse.RegionStatus.newBuilder().setName("ghost").build())
          .build());
      o.onCompleted();
    }
  }

  @BeforeAll
  static void start() throws Exception {
    server = NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", 0))
        .addService(new Yes()).build().start();
    url = "127.0.0.1:" + server.getPort();
  }

  @AfterAll
  static void stop() {
    server.shutdownNow();
  }

  record Run(int rc, String out) {}

  static Run run(String... args) throws Exception {
    ByteArrayOutputStream buf = new ByteArrayOutputStream();
    String[] all = new String[args.length + 4];
    all[0] = "--url";
    all[1] = url;
    all[2] = "--cases";
    all[3] = CASES;
    System.arraycopy(args, 0, all, 4, args.length);
    int rc = ConformanceRunner.runMain(all, new PrintStream(buf, true, StandardCharsets.UTF_8));
    return new Run(rc, buf.toString(StandardCharsets.UTF_8));
  }

  @Test
  void unexpectedSuccessIsAFailure() throws Exception {
    String[][] expected = {
      {"error_model_ready_unknown",
       // the protocol allows NOT_FOUND or ready=false: ready=true is neither
       "FAIL error_model_ready_unknown: call succeeded (ready=true), expected status NOT_FOUND | or: model ready is true, expected false"},
      {"error_unknown_version",
       "FAIL error_unknown_version: call succeeded (model \"cf_fp32\" version \"1\", outputs [data_out]), expected status NOT_FOUND"},
      {"metadata_unknown_model",
       "FAIL metadata_unknown_model: call succeeded (name=\"conformance_no_such_model\" versions=[1]), expected status NOT_FOUND"},
      {"error_raw_and_typed",
       "FAIL error_raw_and_typed: call succeeded (model \"cf_fp32\" version \"1\", outputs [data_out]), expected status INVALID_ARGUMENT"},
      {"cuda_shm_register_refused",
       "FAIL cuda_shm_register_refused: call succeeded (CudaSharedMemoryRegister answered (regions [])), expected status INVALID_ARGUMENT"},
      {"cuda_shm_status_empty", "FAIL cuda_shm_status_empty: regions [ghost], expected []"},
    };
    for (String[] e : expected) {
      Run r = run("--run", e[0]);
      assertEquals(1, r.rc(), r.out());
      assertTrue(r.out().contains(e[1] + System.lineSeparator()), r.out());
      assertTrue(r.out().contains("conformance java: 0 passed, 1 failed"), r.out());
    }
    Run live = run("--run", "health_server_live");
    assertEquals(0, live.rc(), live.out());
    assertTrue(live.out().contains("PASS health_server_live"), live.out());
  }

  @Test
  void featuresNotClaimedAreNotApplicable() throws Exception {
    Run r = run("--run", "error_", "--features=core");
    assertEquals(1, r.rc(), r.out());
    assertTrue(r.out().contains("N/A error_unknown_version (needs jaxport-models, versions)"), r.out());
    assertTrue(r.out().contains("FAIL error_model_ready_unknown: call succeeded"), r.out());
    assertTrue(r.out().contains("conformance java: 0 passed, 2 failed, "), r.out());
    IllegalArgumentException bad =
        assertThrows(IllegalArgumentException.class, () -> run("--features", "versions,nonsense"));
    assertTrue(bad.getMessage().contains("unknown feature(s) [nonsense]"), bad.getMessage());
  }

  /** --json and --junit write the same results as the text report, in the Python/Go forms. */
  @Test
  void jsonAndJunitReports(@org.junit.jupiter.api.io.TempDir java.nio.file.Path dir) throws Exception {
    java.nio.file.Path json = dir.resolve("r.json");
    java.nio.file.Path junit = dir.resolve("r.xml");
    Run r = run("--run", "error_", "--features=core", "--json", json.toString(),
        "--junit=" + junit);
    assertEquals(1, r.rc(), r.out());
    com.google.gson.JsonObject doc = com.google.gson.JsonParser.parseString(
        java.nio.file.Files.readString(json)).getAsJsonObject();
    assertEquals("java", doc.get("runner").getAsString());
    assertEquals(0, doc.get("passed").getAsInt());
    assertEquals(2, doc.get("failed").getAsInt());
    int na = doc.get("not_applicable").getAsInt();
    assertTrue(r.out().contains("conformance java: 0 passed, 2 failed, " + na + " not applicable"), r.out());
    assertEquals(2 + na, doc.getAsJsonArray("cases").size());
    com.google.gson.JsonObject first = null;
    for (com.google.gson.JsonElement e : doc.getAsJsonArray("cases")) {
      if (e.getAsJsonObject().get("name").getAsString().equals("error_model_ready_unknown")) {
        first = e.getAsJsonObject();
      }
    }
    assertEquals("FAIL", first.get("status").getAsString());
    assertTrue(first.get("message").getAsString().startsWith("call succeeded (ready=true)"));
    assertTrue(doc.getAsJsonArray("features").isEmpty()); // core: nothing claimed
    org.w3c.dom.Document xml = javax.xml.parsers.DocumentBuilderFactory.newInstance()
        .newDocumentBuilder().parse(junit.toFile());
    org.w3c.dom.Element suite = (org.w3c.dom.Element) xml.getElementsByTagName("testsuite").item(0);
    assertEquals(String.valueOf(2 + na), suite.getAttribute("tests"));
    assertEquals("2", suite.getAttribute("failures"));
    assertEquals(String.valueOf(na), suite.getAttribute("skipped"));
    assertEquals(2, xml.getElementsByTagName("failure").getLength());
    assertEquals(na, xml.getElementsByTagName("skipped").getLength());
  }
}
