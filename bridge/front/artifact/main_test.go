package artifact_test

import (
	"os"
	"testing"

	"github.com/jaxport/jaxport/bridge/front/artifact/artifacttest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	artifacttest.StopMoto()
	os.Exit(code)
}
