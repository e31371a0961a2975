package dispatch

// A program whose check table the front cannot format exactly (engine.NewChecks refused a
// template: the workers serve such a model, since the native engine refuses it too) still
// answers a fired check with its kind's status: the fired effect with the smallest code, as
// err.get() chooses it, and a message naming the check's code and location and why JAX's
// text is not reproduced. Nothing fired: nothing to say.

import (
	"encoding/binary"
	"fmt"

	"github.com/jaxport/jaxport/bridge/front/engine"
	"github.com/jaxport/jaxport/bridge/front/request"
	"github.com/jaxport/jaxport/bridge/front/status"
	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
	"google.golang.org/grpc/codes"
)

func uncheckedFailure(table *jaxportv1.Checks, results []*jaxportv1.Result, data []request.Tensor, why error) error {
	fired := map[uint32]bool{}
	codeAt := map[uint32]int{}
	for i, r := range results {
		if r.GetRole() != jaxportv1.ResultRole_RESULT_ROLE_CHECK || i >= len(data) {
			continue
		}
		switch r.GetCheck().GetPart() {
		case "predicate":
			fired[r.GetCheck().GetEffect()] = len(data[i].Data) > 0 && data[i].Data[0] != 0
		case "code":
			codeAt[r.GetCheck().GetEffect()] = i
		}
	}
	var first *jaxportv1.ErrorCode
	for effect, on := range fired {
		at, ok := codeAt[effect]
		if !on || !ok || len(data[at].Data) < 4 {
			continue
		}
		code := int32(binary.LittleEndian.Uint32(data[at].Data))
		for _, e := range table.GetCodes() {
			if e.GetCode() == code && e.GetEffect() == effect && (first == nil || code < first.GetCode()) {
				first = e
			}
		}
	}
	if first == nil {
		return nil
	}
	c, ok := engine.KindStatus(first.GetKind())
	if !ok {
		c = codes.Internal
	}
	return status.New(c, fmt.Sprintf("%s check %d failed at %s (its message cannot be reproduced by the front: %v)",
		first.GetKind(), first.GetCode(), first.GetLocation(), why))
}
