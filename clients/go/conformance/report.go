package conformance

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The three statuses of a case, as the text report prints them.
const (
	Pass          = "PASS"
	Fail          = "FAIL"
	NotApplicable = "N/A"
)

// Result is one case of a run: its status, why (a failure's message, an N/A's missing
// features) and how long it took.
type Result struct {
	Name    string  `json:"name"`
	Status  string  `json:"status"`
	Message string  `json:"message"`
	Seconds float64 `json:"seconds"`
}

// Line is the case's line of the text report.
func (r Result) Line() string {
	switch r.Status {
	case Pass:
		return fmt.Sprintf("PASS %s (%d ms)", r.Name, int64(r.Seconds*1e3+0.5))
	case Fail:
		return fmt.Sprintf("FAIL %s: %s", r.Name, r.Message)
	}
	return fmt.Sprintf("N/A %s (%s)", r.Name, r.Message)
}

// Report is every result of one run in case order; Label names the runner ("go"). The same
// three forms as the Python runner (tests/conformance/jaxport_conformance/report.py): text
// lines, JSON and JUnit XML whose tests/failures/skipped are the summary's
// passed+failed+N/A, failed and N/A.
type Report struct {
	Label    string   `json:"runner"`
	Features []string `json:"features"` // nil: all
	Results  []Result `json:"cases"`
}

// Count is the number of results with that status.
func (r *Report) Count(status string) int {
	n := 0
	for _, x := range r.Results {
		if x.Status == status {
			n++
		}
	}
	return n
}

// Summary is the last line of the text report.
func (r *Report) Summary() string {
	tail := ""
	if na := r.Count(NotApplicable); na > 0 {
		tail = fmt.Sprintf(", %d not applicable", na)
	}
	return fmt.Sprintf("conformance %s: %d passed, %d failed%s", r.Label, r.Count(Pass), r.Count(Fail), tail)
}

// WriteJSON writes the results as the Python runner's --json does.
func (r *Report) WriteJSON(path string) error {
	doc := map[string]any{
		"runner": r.Label, "features": r.Features, "passed": r.Count(Pass), "failed": r.Count(Fail),
		"not_applicable": r.Count(NotApplicable), "cases": r.Results,
	}
	raw, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(raw, '\n'), 0o644)
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

type junitCase struct {
	Classname string        `xml:"classname,attr"`
	Name      string        `xml:"name,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Skipped   *junitMessage `xml:"skipped,omitempty"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Errors   int         `xml:"errors,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Time     string      `xml:"time,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitSuites struct {
	XMLName xml.Name   `xml:"testsuites"`
	Name    string     `xml:"name,attr"`
	Suite   junitSuite `xml:"testsuite"`
}

// WriteJUnit writes JUnit XML: one testsuite, a testcase per case, <failure> for FAIL and
// <skipped> for N/A.
func (r *Report) WriteJUnit(path string) error {
	total := 0.0
	suite := junitSuite{
		Name: "conformance " + r.Label, Tests: len(r.Results), Failures: r.Count(Fail),
		Skipped: r.Count(NotApplicable),
	}
	for _, x := range r.Results {
		total += x.Seconds
		c := junitCase{Classname: "conformance." + r.Label, Name: x.Name, Time: fmt.Sprintf("%.3f", x.Seconds)}
		switch x.Status {
		case Fail:
			c.Failure = &junitMessage{Message: x.Message, Text: x.Message}
		case NotApplicable:
			c.Skipped = &junitMessage{Message: x.Message}
		}
		suite.Cases = append(suite.Cases, c)
	}
	suite.Time = fmt.Sprintf("%.3f", total)
	raw, err := xml.MarshalIndent(junitSuites{Name: "jaxport-conformance", Suite: suite}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append([]byte(xml.Header), append(raw, '\n')...), 0o644)
}

// ProfileText is --features as given, or, when it names an existing file, that file's feature
// names (separated by commas, spaces or lines; '#' starts a comment) joined by commas: the same
// rule as the Python runner's.
func ProfileText(text string) (string, error) {
	t := strings.TrimSpace(text)
	if t == "" || t == "all" || t == "core" {
		return text, nil
	}
	info, err := os.Stat(t)
	if err != nil || info.IsDir() {
		return text, nil
	}
	raw, err := os.ReadFile(filepath.Clean(t))
	if err != nil {
		return "", err
	}
	var words []string
	for _, line := range strings.Split(string(raw), "\n") {
		line, _, _ = strings.Cut(line, "#")
		words = append(words, strings.Fields(strings.ReplaceAll(line, ",", " "))...)
	}
	if len(words) == 0 {
		return "core", nil
	}
	return strings.Join(words, ","), nil
}
