package security

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jaxport/jaxport/bridge/front/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

func TestTokenMatches(t *testing.T) {
	token := []byte("s3cret")
	for header, ok := range map[string]bool{
		"Bearer s3cret": true, "bearer s3cret ": true, "BEARER s3cret": true,
		"Bearer s3cre": false, "Basic s3cret": false, "s3cret": false, "": false,
	} {
		if TokenMatches([]string{header}, token) != ok {
			t.Errorf("%q: want %v", header, ok)
		}
	}
}

func TestAuthorized(t *testing.T) {
	token := []byte("t0k")
	if err := Authorized(context.Background(), "/inference.GRPCInferenceService/ServerReady", token); err != nil {
		t.Fatalf("health is open: %v", err)
	}
	err := Authorized(context.Background(), "/inference.GRPCInferenceService/ModelInfer", token)
	if status.Code(err) != codes.Unauthenticated || status.Convert(err).Message() != UnauthenticatedDetails {
		t.Fatalf("no token: %v", err)
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer t0k"))
	if err := Authorized(ctx, "/inference.GRPCInferenceService/ModelInfer", token); err != nil {
		t.Fatalf("token: %v", err)
	}
}

func TestConfigurationErrorsNameTheFlag(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cert, key, ca, want string
	}{
		{"", "", "ca.pem", "--tls-client-ca needs --tls-cert and --tls-key"},
		{"c.pem", "", "", "TLS needs both --tls-cert and --tls-key; --tls-key is missing"},
		{filepath.Join(dir, "nope"), empty, "", "cannot read TLS certificate '" + filepath.Join(dir, "nope") + "' given by --tls-cert"},
		{empty, empty, "", "TLS certificate '" + empty + "' given by --tls-cert is empty"},
	} {
		if _, err := TLSConfig(c.cert, c.key, c.ca); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%+v: %v", c, err)
		}
	}
	if cfg, err := TLSConfig("", "", ""); cfg != nil || err != nil {
		t.Fatalf("plaintext: %v %v", cfg, err)
	}
	tok := filepath.Join(dir, "tok")
	_ = os.WriteFile(tok, []byte("two words\n"), 0o600)
	if _, err := ReadTokenFile(tok); err == nil || !strings.Contains(err.Error(), "printable ASCII without spaces") {
		t.Fatalf("token with a space: %v", err)
	}
	_ = os.WriteFile(tok, []byte(" abc \n"), 0o600)
	if got, err := ReadTokenFile(tok); err != nil || string(got) != "abc" {
		t.Fatalf("token: %q %v", got, err)
	}
}
