package jaxport

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// testPKI writes a CA, a server certificate for 127.0.0.1 and a client certificate (PKCS#8
// keys, as tests/support/certs.py writes them) into dir, all generated here.
func testPKI(t *testing.T, dir string) (caPath, srvCert, srvKey, cliCert, cliKey string) {
	t.Helper()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, kind string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	now := time.Now()
	caKey := newKey()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (string, string) {
		k := newKey()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{usage},
			KeyUsage: x509.KeyUsageDigitalSignature, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return write(name+".pem", "CERTIFICATE", der), write(name+".key", "PRIVATE KEY", keyDER)
	}
	srvCert, srvKey = leaf("server", 2, x509.ExtKeyUsageServerAuth)
	cliCert, cliKey = leaf("client", 3, x509.ExtKeyUsageClientAuth)
	return write("ca.pem", "CERTIFICATE", caDER), srvCert, srvKey, cliCert, cliKey
}

func TestWithTLSFilesMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, srvCert, srvKey, cliCert, cliKey := testPKI(t, dir)
	pair, err := tls.LoadX509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(ca)
	pool.AppendCertsFromPEM(caPEM)
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(creds))
	impl := &echoServer{lastAuth: make(chan string, 1)}
	pb.RegisterGRPCInferenceServiceServer(srv, impl)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	addr := lis.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	withCert := dial(t, addr, WithTLSFiles(ca, cliCert, cliKey), WithBearerToken("tls-secret"))
	if live, err := withCert.Live(ctx); err != nil || !live {
		t.Fatalf("with a client certificate: live=%v err=%v", live, err)
	}
	if got := <-impl.lastAuth; got != "Bearer tls-secret" {
		t.Fatalf("a token over TLS must be sent: authorization %q", got)
	}
	// Lazy (no WaitReady): the refusal must surface as the call's status.
	noCert, err := NewClient(addr, WithTLSFiles(ca, "", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer noCert.Close()
	_, err = noCert.Live(ctx)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("without a client certificate: want Unavailable, got %v", err)
	}
}

func TestWithTLSFilesBadFilesFailNewClientNamingThem(t *testing.T) {
	dir := t.TempDir()
	ca, _, _, cliCert, _ := testPKI(t, dir)
	missing := filepath.Join(dir, "absent.key")
	notPEM := filepath.Join(dir, "not-pem.txt")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		opt  Option
		want string
	}{
		"missing CA":       {WithTLSFiles(filepath.Join(dir, "absent-ca.pem"), "", ""), "absent-ca.pem"},
		"CA not PEM":       {WithTLSFiles(notPEM, "", ""), "not-pem.txt: no PEM certificate"},
		"missing key":      {WithTLSFiles(ca, cliCert, missing), "absent.key"},
		"cert without key": {WithTLSFiles(ca, cliCert, ""), "go together"},
	}
	for name, c := range cases {
		_, err := NewClient("127.0.0.1:1", c.opt)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: want an error naming %q, got %v", name, c.want, err)
		}
	}
}
