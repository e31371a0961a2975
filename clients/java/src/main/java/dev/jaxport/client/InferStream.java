package dev.jaxport.client;

import dev.jaxport.inference.GRPCInferenceServiceGrpc;
import dev.jaxport.inference.ModelInferRequest;
import dev.jaxport.inference.ModelStreamInferResponse;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * An open ModelStreamInfer call ({@link InferenceClient#openStream}): a real bidirectional
 * stream. {@link #send} requests and {@link #next} results in arrival order, interleaved in any
 * way (send one, read its result, send the next; or send many, then read); {@link #closeSend}
 * says no more requests follow. A failed request is a {@link InferenceClient.StreamResult}
 * whose {@code status()} keeps its code, and the stream goes on; a failure of the whole stream
 * (its deadline included) is the StatusRuntimeException {@code next} throws. Results are read
 * with flow control: the server is asked for one response at a time, as {@code next} takes
 * them, so an unread stream holds at most one result in memory. {@link #close} cancels a stream
 * that has not ended. {@code send}/{@code closeSend} from one thread at a time; {@code next}
 * from one thread at a time (they may be different threads).
 */
public final class InferStream implements AutoCloseable {
  /** A result, the end (ok, null result) or the stream's failure (error). */
  private record Item(InferenceClient.StreamResult result, StatusRuntimeException error, boolean end) {}

  private final LinkedBlockingQueue<Item> items = new LinkedBlockingQueue<>();
  private final ClientCallStreamObserver<ModelInferRequest> requests;
  private volatile boolean finished; // the server ended the stream (or it failed)
  private volatile StatusRuntimeException terminal; // how it failed (null: ended OK or still open)
  private boolean halfClosed; // the sender's thread
  private boolean ended; // next() has returned the end or thrown the failure (the reader's thread)

  InferStream(GRPCInferenceServiceGrpc.GRPCInferenceServiceStub stub) {
    // beforeStart runs inside modelStreamInfer, before it returns the same request stream
    this.requests = (ClientCallStreamObserver<ModelInferRequest>) stub.modelStreamInfer(
        new ClientResponseObserver<ModelInferRequest, ModelStreamInferResponse>() {
      @Override
      public void beforeStart(ClientCallStreamObserver<ModelInferRequest> requestStream) {
        requestStream.disableAutoRequestWithInitial(1);
      }

      @Override
      public void onNext(ModelStreamInferResponse r) {
        InferenceClient.StreamResult result;
        try {
          result = InferenceClient.streamResult(r);
        } catch (StatusRuntimeException e) { // a response this client cannot decode
          result = new InferenceClient.StreamResult(null, e.getStatus(), e.getStatus().getDescription(),
              r.getInferResponse().getId());
        }
        items.add(new Item(result, null, false));
      }

      @Override
      public void onError(Throwable t) {
        terminal = Status.fromThrowable(t).asRuntimeException(Status.trailersFromThrowable(t));
        finished = true;
        items.add(new Item(null, terminal, true));
      }

      @Override
      public void onCompleted() {
        finished = true;
        items.add(new Item(null, null, true));
      }
    });
  }

  /**
   * Send one request. StatusRuntimeException: the one that ended the stream if it failed;
   * FAILED_PRECONDITION after {@link #closeSend} or once the server has ended the stream.
   */
  public void send(InferRequest request) {
    StatusRuntimeException failed = terminal;
    if (failed != null) {
      throw failed;
    }
    if (halfClosed || finished) {
      throw ClientErrors.failedPrecondition(
          halfClosed ? "send after closeSend on this stream" : "send on a stream the server has ended");
    }
    requests.onNext(request.toProto());
  }

  /** No more requests follow; results keep arriving until the server ends the stream. */
  public void closeSend() {
    if (!halfClosed) {
      halfClosed = true;
      requests.onCompleted();
    }
  }

  /**
   * The next result, waiting for it; empty once the server has ended the stream. Throws the
   * StatusRuntimeException that ended the stream (DEADLINE_EXCEEDED at its deadline, ...), again
   * on every later call.
   */
  public Optional<InferenceClient.StreamResult> next() throws InterruptedException {
    return ended ? take(null) : take(items.take());
  }

  /**
   * {@link #next}, waiting at most {@code timeout}: null (not empty) when nothing arrived in
   * that time, so a caller can tell "not yet" from "ended".
   */
  public Optional<InferenceClient.StreamResult> next(Duration timeout) throws InterruptedException {
    if (ended) {
      return take(null);
    }
    Item item = items.poll(timeout.toNanos(), TimeUnit.NANOSECONDS);
    return item == null ? null : take(item);
  }

  private Optional<InferenceClient.StreamResult> take(Item item) {
    if (ended || item.end()) {
      ended = true;
      if (terminal != null) {
        throw terminal;
      }
      return Optional.empty();
    }
    requests.request(1);
    return Optional.of(item.result());
  }

  /** Cancel the stream if it has not ended (results not yet read are dropped). */
  @Override
  public void close() {
    if (!finished) {
      requests.cancel("closed by the client", null);
    }
  }
}
