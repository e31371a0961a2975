package dispatch

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/jaxport/jaxport/bridge/front/request"
	"github.com/jaxport/jaxport/bridge/front/status"
	jaxportv1 "github.com/jaxport/jaxport/clients/go/gen/jaxport/v1"
	"google.golang.org/grpc/codes"
)

func TestUncheckedFailureAnswersTheFiredKindsStatus(t *testing.T) {
	check := func(name, part string, effect uint32) *jaxportv1.Result {
		return &jaxportv1.Result{Name: name, Role: jaxportv1.ResultRole_RESULT_ROLE_CHECK,
			Check: &jaxportv1.CheckLeaf{Part: part, Effect: effect}}
	}
	results := []*jaxportv1.Result{{Name: "y", Role: jaxportv1.ResultRole_RESULT_ROLE_OUTPUT},
		check("p0", "predicate", 0), check("c0", "code", 0), check("p1", "predicate", 1), check("c1", "code", 1)}
	table := &jaxportv1.Checks{Codes: []*jaxportv1.ErrorCode{
		{Code: 1, Kind: "nan", Effect: 0, Location: "m.py:3 (f)"},
		{Code: 2, Kind: "user", Effect: 1, Location: "m.py:9 (f)"}}}
	i32 := func(v int32) []byte { return binary.LittleEndian.AppendUint32(nil, uint32(v)) }
	data := func(p0, p1 byte) []request.Tensor {
		return []request.Tensor{{Data: []byte{0}}, {Data: []byte{p0}}, {Data: i32(1)}, {Data: []byte{p1}}, {Data: i32(2)}}
	}
	why := errors.New("format spec \"#x\" is not supported")
	if err := uncheckedFailure(table, results, data(0, 0), why); err != nil {
		t.Fatalf("nothing fired: %v", err)
	}
	err := uncheckedFailure(table, results, data(0, 1), why)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "user check 2 failed at m.py:9 (f)") ||
		!strings.Contains(err.Error(), "#x") {
		t.Fatalf("user fired: %v", err)
	}
	// Both fired: the smallest code wins, as err.get() chooses.
	if err := uncheckedFailure(table, results, data(1, 1), why); status.Code(err) != codes.FailedPrecondition ||
		!strings.Contains(err.Error(), "nan check 1") {
		t.Fatalf("both fired: %v", err)
	}
}
