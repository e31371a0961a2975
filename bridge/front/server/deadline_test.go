package server

import (
	"context"
	"testing"
	"time"
)

func TestAnswerBeforeDeadline(t *testing.T) {
	ctx, cancel := answerBeforeDeadline(context.Background())
	defer cancel()
	if _, ok := ctx.Deadline(); ok {
		t.Fatal("a call without a deadline got one")
	}
	dl := time.Now().Add(10 * time.Second)
	parent, pcancel := context.WithDeadline(context.Background(), dl)
	defer pcancel()
	ctx, cancel = answerBeforeDeadline(parent)
	defer cancel()
	if got, _ := ctx.Deadline(); !got.Equal(dl.Add(-deadlineMargin)) {
		t.Fatalf("deadline %v, want %v", got, dl.Add(-deadlineMargin))
	}
	// Little time left: at most a tenth of it is taken.
	short := time.Now().Add(50 * time.Millisecond)
	parent, pcancel = context.WithDeadline(context.Background(), short)
	defer pcancel()
	ctx, cancel = answerBeforeDeadline(parent)
	defer cancel()
	if got, _ := ctx.Deadline(); got.Before(short.Add(-5*time.Millisecond)) || !got.Before(short) {
		t.Fatalf("deadline %v for a parent deadline %v", got, short)
	}
}
