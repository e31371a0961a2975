// Command jaxport-conformance runs the shared conformance cases against any Open Inference
// Protocol server with the jaxport Go client:
//
//	go run ./cmd/jaxport-conformance --url 127.0.0.1:8001 --cases ../../tests/conformance/cases
//
// It prints one PASS/FAIL/N/A line per case and "conformance go: N passed, M failed[, K not
// applicable]", and exits 1 if any case failed (2 for a usage error). --features names what the
// server claims beyond the core protocol (the feature table, features.json beside the cases);
// cases needing more are N/A.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	jaxport "github.com/jaxport/jaxport/clients/go"
	"github.com/jaxport/jaxport/clients/go/conformance"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	flag := flag.NewFlagSet("jaxport-conformance", flag.ContinueOnError)
	flag.SetOutput(stderr)
	url := flag.String("url", os.Getenv("JAXPORT_CONFORMANCE_URL"), "server host:port (default $JAXPORT_CONFORMANCE_URL)")
	cases := flag.String("cases", "../../tests/conformance/cases", "case directory")
	features := flag.String("features", "all", "what the server claims beyond the core protocol: all, core, or a comma list of "+
		"the feature table's names (with anything but all, features named by ServerMetadata.extensions are added)")
	featuresFile := flag.String("features-file", "", "the feature table (default: features.json beside --cases)")
	protocolOnly := flag.Bool("protocol-only", false, "the same as --features core")
	only := flag.String("run", "", "only cases whose name contains this")
	timeout := flag.Duration("timeout", 60*time.Second, "deadline of each case")
	ca := flag.String("ca", os.Getenv("JAXPORT_CONFORMANCE_CA"), "PEM CA certificate: use TLS (default $JAXPORT_CONFORMANCE_CA)")
	cert := flag.String("cert", os.Getenv("JAXPORT_CONFORMANCE_CERT"), "PEM client certificate for mutual TLS, with --key (default $JAXPORT_CONFORMANCE_CERT)")
	key := flag.String("key", os.Getenv("JAXPORT_CONFORMANCE_KEY"), "PEM private key of --cert (default $JAXPORT_CONFORMANCE_KEY)")
	token := flag.String("token", os.Getenv("JAXPORT_CONFORMANCE_TOKEN"), "bearer token sent on every call (default $JAXPORT_CONFORMANCE_TOKEN)")
	if err := flag.Parse(args); err != nil {
		return 2
	}
	if *protocolOnly {
		*features = "core"
	}
	if *featuresFile == "" {
		*featuresFile = conformance.FeaturesFile(*cases)
	}
	table, err := conformance.LoadFeatures(*featuresFile)
	if err != nil {
		fmt.Fprintf(stderr, "jaxport-conformance: error: %v\n", err)
		return 2
	}
	claimed, err := table.ParseFeatures(*features)
	if err != nil {
		fmt.Fprintf(stderr, "jaxport-conformance: error: %v\n", err)
		return 2
	}
	if *url == "" {
		fmt.Fprintln(stderr, "jaxport-conformance: error: --url (or JAXPORT_CONFORMANCE_URL) is required")
		return 2
	}
	all, err := conformance.LoadCases(*cases)
	if err != nil {
		fmt.Fprintf(stderr, "jaxport-conformance: error: %v\n", err)
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
		fmt.Fprintf(stderr, "jaxport-conformance: error: %v\n", err)
		return 2
	}
	defer client.Close()
	runner := conformance.Runner{Client: client}
	if claimed != nil {
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		if meta, err := client.ServerMetadata(ctx); err == nil { // else metadata_server reports it
			table.AddExtensions(claimed, meta.GetExtensions())
		}
		cancel()
		var names []string
		for f := range claimed {
			names = append(names, f)
		}
		sort.Strings(names)
		if len(names) == 0 {
			names = []string{"core only"}
		}
		fmt.Fprintf(stdout, "features claimed: %s\n", strings.Join(names, ", "))
	}
	passed, failed, notApplicable := 0, 0, 0
	for _, c := range all {
		if *only != "" && !strings.Contains(c.Name, *only) {
			continue
		}
		if missing := conformance.Missing(c, claimed); len(missing) > 0 {
			fmt.Fprintf(stdout, "N/A %s (needs %s)\n", c.Name, strings.Join(missing, ", "))
			notApplicable++
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		start := time.Now()
		err := runner.Run(ctx, c)
		cancel()
		if err != nil {
			failed++
			fmt.Fprintf(stdout, "FAIL %s: %v\n", c.Name, err)
			continue
		}
		passed++
		fmt.Fprintf(stdout, "PASS %s (%d ms)\n", c.Name, time.Since(start).Milliseconds())
	}
	tail := ""
	if notApplicable > 0 {
		tail = fmt.Sprintf(", %d not applicable", notApplicable)
	}
	fmt.Fprintf(stdout, "conformance go: %d passed, %d failed%s\n", passed, failed, tail)
	if failed > 0 {
		return 1
	}
	return 0
}
