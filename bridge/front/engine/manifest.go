package engine

import (
	"fmt"
	"strings"
)

// Refused is why the engine will not run a model: one line naming the model and the cause, so
// the front can log it and hand the model to the Python workers instead. Reading failures
// (checksums, missing files) are no refusal: they are the version's load error, whichever
// engine would serve it.
type Refused struct {
	Model  string
	Reason string
}

func (r *Refused) Error() string {
	return fmt.Sprintf("native engine: model %s: %s", r.Model, oneLine(r.Reason))
}

// oneLine keeps the first line of a (compiler's) multi-line message and says how many followed.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	first, rest, found := strings.Cut(s, "\n")
	if !found {
		return s
	}
	return fmt.Sprintf("%s (+%d more lines)", strings.TrimSpace(first), strings.Count(rest, "\n")+1)
}
