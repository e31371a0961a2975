// Command jaxport-conformance runs the shared conformance cases against any Open Inference
// Protocol server with the jaxport Go client:
//
//	go run ./cmd/jaxport-conformance --url 127.0.0.1:8001 --cases ../../tests/conformance/cases
//
// It prints one PASS/FAIL/SKIP line per case and "conformance go: N passed, M failed", and exits
// 1 if any case failed (2 for a usage error).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	jaxport "github.com/jaxport/jaxport/clients/go"
	"github.com/jaxport/jaxport/clients/go/conformance"
)

func main() {
	os.Exit(run())
}

func run() int {
	url := flag.String("url", os.Getenv("JAXPORT_CONFORMANCE_URL"), "server host:port (default $JAXPORT_CONFORMANCE_URL)")
	cases := flag.String("cases", "../../tests/conformance/cases", "case directory")
	protocolOnly := flag.Bool("protocol-only", false, "skip cases that need jaxport's own suite models")
	only := flag.String("run", "", "only cases whose name contains this")
	timeout := flag.Duration("timeout", 60*time.Second, "deadline of each case")
	ca := flag.String("ca", os.Getenv("JAXPORT_CONFORMANCE_CA"), "PEM CA certificate: use TLS (default $JAXPORT_CONFORMANCE_CA)")
	cert := flag.String("cert", os.Getenv("JAXPORT_CONFORMANCE_CERT"), "PEM client certificate for mutual TLS, with --key (default $JAXPORT_CONFORMANCE_CERT)")
	key := flag.String("key", os.Getenv("JAXPORT_CONFORMANCE_KEY"), "PEM private key of --cert (default $JAXPORT_CONFORMANCE_KEY)")
	token := flag.String("token", os.Getenv("JAXPORT_CONFORMANCE_TOKEN"), "bearer token sent on every call (default $JAXPORT_CONFORMANCE_TOKEN)")
	flag.Parse()
	if *url == "" {
		fmt.Fprintln(os.Stderr, "jaxport-conformance: error: --url (or JAXPORT_CONFORMANCE_URL) is required")
		return 2
	}
	all, err := conformance.LoadCases(*cases)
	if err != nil {
		fmt.Fprintf(os.Stderr, "jaxport-conformance: error: %v\n", err)
		return 2
	}
	var opts []jaxport.Option
	if *ca != "" || *cert != "" || *key != "" {
		opts = append(opts, jaxport.WithTLSFiles(*ca, *cert, *key))
	}
	if *token != "" {
		opts = append(opts, jaxport.WithBearerToken(*token))
	}
	client, err := jaxport.Dial(context.Background(), *url, opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "jaxport-conformance: error: %v\n", err)
		return 2
	}
	defer client.Close()
	runner := conformance.Runner{Client: client}
	passed, failed, skipped := 0, 0, 0
	for _, c := range all {
		if *only != "" && !strings.Contains(c.Name, *only) {
			continue
		}
		if *protocolOnly && len(c.Requires) > 0 {
			fmt.Printf("SKIP %s (requires %s)\n", c.Name, strings.Join(c.Requires, ", "))
			skipped++
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		start := time.Now()
		err := runner.Run(ctx, c)
		cancel()
		if err != nil {
			failed++
			fmt.Printf("FAIL %s: %v\n", c.Name, err)
			continue
		}
		passed++
		fmt.Printf("PASS %s (%d ms)\n", c.Name, time.Since(start).Milliseconds())
	}
	tail := ""
	if skipped > 0 {
		tail = fmt.Sprintf(", %d skipped", skipped)
	}
	fmt.Printf("conformance go: %d passed, %d failed%s\n", passed, failed, tail)
	if failed > 0 {
		return 1
	}
	return 0
}
