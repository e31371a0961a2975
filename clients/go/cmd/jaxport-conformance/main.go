// Command jaxport-conformance runs the shared conformance cases against any Open Inference
// Protocol server with the jaxport Go client:
//
//	go install ./clients/go/cmd/jaxport-conformance   # from a jaxport checkout
//	jaxport-conformance --url 127.0.0.1:8001 --cases tests/conformance/cases --features core \
//	    [--json FILE] [--junit FILE]
//
// It prints one PASS/FAIL/N/A line per case and "conformance go: N passed, M failed[, K not
// applicable]", and exits 1 if any case failed (2 for a usage error). --features names what the
// server claims beyond the core protocol ("core", "all", a comma list, or a file of names; the
// feature table is features.json beside the cases); cases needing more are N/A. --json and
// --junit write the results as the Python runner (jaxport-conformance wheel) does. The cases
// come from --cases, else $JAXPORT_CONFORMANCE_CASES, else ../../tests/conformance/cases (a
// checkout's clients/go). Only --transport grpc: the REST runner is the Python one.
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

	"github.com/jaxport/jaxport/clients/go/conformance"
	"github.com/jaxport/jaxport/clients/go/jaxport"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	flag := flag.NewFlagSet("jaxport-conformance", flag.ContinueOnError)
	flag.SetOutput(stderr)
	url := flag.String("url", os.Getenv("JAXPORT_CONFORMANCE_URL"), "server host:port (default $JAXPORT_CONFORMANCE_URL)")
	defaultCases := os.Getenv("JAXPORT_CONFORMANCE_CASES")
	if defaultCases == "" {
		defaultCases = "../../tests/conformance/cases"
	}
	cases := flag.String("cases", defaultCases, "case directory (default $JAXPORT_CONFORMANCE_CASES, else a checkout's)")
	features := flag.String("features", "all", "what the server claims beyond the core protocol: all, core, a comma list of "+
		"the feature table's names, or a file of them (with anything but all, features named by ServerMetadata.extensions are added)")
	transport := flag.String("transport", "grpc", "grpc (the Go runner's only transport; REST: the Python jaxport-conformance)")
	jsonOut := flag.String("json", "", "also write the results as JSON to this file")
	junitOut := flag.String("junit", "", "also write the results as JUnit XML to this file")
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
	if *transport != "grpc" {
		fmt.Fprintf(stderr, "jaxport-conformance: error: --transport %q: the Go runner speaks grpc only "+
			"(REST: the Python runner, jaxport-conformance --transport rest)\n", *transport)
		return 2
	}
	if *protocolOnly {
		*features = "core"
	}
	if info, err := os.Stat(*cases); err != nil || !info.IsDir() {
		fmt.Fprintf(stderr, "jaxport-conformance: error: no case directory %s (--cases or $JAXPORT_CONFORMANCE_CASES)\n", *cases)
		return 2
	}
	if *featuresFile == "" {
		*featuresFile = conformance.FeaturesFile(*cases)
	}
	table, err := conformance.LoadFeatures(*featuresFile)
	if err != nil {
		fmt.Fprintf(stderr, "jaxport-conformance: error: feature table: %v (features.json beside --cases, or --features-file)\n", err)
		return 2
	}
	profile, err := conformance.ProfileText(*features)
	if err != nil {
		fmt.Fprintf(stderr, "jaxport-conformance: error: --features: %v\n", err)
		return 2
	}
	claimed, err := table.ParseFeatures(profile)
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
	client, err := jaxport.NewClient(*url, opts...)
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
	report := conformance.Report{Label: "go"}
	if claimed != nil {
		report.Features = []string{}
		for f := range claimed {
			report.Features = append(report.Features, f)
		}
		sort.Strings(report.Features)
	}
	for _, c := range all {
		if *only != "" && !strings.Contains(c.Name, *only) {
			continue
		}
		result := conformance.Result{Name: c.Name}
		if reason := conformance.OtherTransport(c); reason != "" {
			result.Status, result.Message = conformance.NotApplicable, reason
		} else if missing := conformance.Missing(c, claimed); len(missing) > 0 {
			result.Status, result.Message = conformance.NotApplicable, "needs "+strings.Join(missing, ", ")
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), *timeout)
			start := time.Now()
			err := runner.Run(ctx, c)
			cancel()
			result.Seconds = time.Since(start).Seconds()
			result.Status = conformance.Pass
			if err != nil {
				result.Status, result.Message = conformance.Fail, err.Error()
			}
		}
		report.Results = append(report.Results, result)
		fmt.Fprintln(stdout, result.Line())
	}
	fmt.Fprintln(stdout, report.Summary())
	for _, out := range []struct {
		path  string
		write func(string) error
	}{{*jsonOut, report.WriteJSON}, {*junitOut, report.WriteJUnit}} {
		if out.path == "" {
			continue
		}
		if err := out.write(out.path); err != nil {
			fmt.Fprintf(stderr, "jaxport-conformance: error: %v\n", err)
			return 2
		}
	}
	if report.Count(conformance.Fail) > 0 {
		return 1
	}
	return 0
}
