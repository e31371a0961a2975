// Package security is the front's TLS / mutual TLS and bearer-token checks, one reading of the
// flags for gRPC and REST alike: the open methods (health and ServerLive/ServerReady, for
// probes), the UNAUTHENTICATED details, the configuration errors (one line naming the flag
// and the file).
package security

import (
	"bytes"
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const UnauthenticatedDetails = "missing or invalid bearer token: send metadata 'authorization: Bearer <token>'"

// OpenMethods need no token (probes): health and ServerLive/ServerReady.
var OpenMethods = map[string]bool{
	"/grpc.health.v1.Health/Check":                true,
	"/grpc.health.v1.Health/Watch":                true,
	"/inference.GRPCInferenceService/ServerLive":  true,
	"/inference.GRPCInferenceService/ServerReady": true,
}

func readPEM(path, what, flag string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		reason := err.Error()
		if pe, ok := err.(*os.PathError); ok {
			reason = pe.Err.Error()
		}
		return nil, fmt.Errorf("cannot read %s '%s' given by %s: %s", what, path, flag, reason)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("%s '%s' given by %s is empty", what, path, flag)
	}
	return data, nil
}

// ServerCredentials: nil for plaintext; TLS, or mTLS with a client CA.
func ServerCredentials(cert, key, clientCA string) (credentials.TransportCredentials, error) {
	cfg, err := TLSConfig(cert, key, clientCA)
	if cfg == nil || err != nil {
		return nil, err
	}
	return credentials.NewTLS(cfg), nil
}

// TLSConfig: the one reading of the TLS flags, shared by gRPC and REST; nil for
// plaintext, every error one line naming the flag and file.
func TLSConfig(cert, key, clientCA string) (*tls.Config, error) {
	if cert == "" && key == "" {
		if clientCA != "" {
			return nil, fmt.Errorf("--tls-client-ca needs --tls-cert and --tls-key (mTLS = TLS + a client CA)")
		}
		return nil, nil
	}
	if cert == "" || key == "" {
		missing := "--tls-key"
		if cert == "" {
			missing = "--tls-cert"
		}
		return nil, fmt.Errorf("TLS needs both --tls-cert and --tls-key; %s is missing", missing)
	}
	certPEM, err := readPEM(cert, "TLS certificate", "--tls-cert")
	if err != nil {
		return nil, err
	}
	keyPEM, err := readPEM(key, "TLS private key", "--tls-key")
	if err != nil {
		return nil, err
	}
	if !bytes.Contains(certPEM, []byte("-----BEGIN")) || !bytes.Contains(certPEM, []byte("CERTIFICATE")) {
		return nil, fmt.Errorf("--tls-cert '%s' is not a PEM certificate", cert)
	}
	if !bytes.Contains(keyPEM, []byte("-----BEGIN")) || !bytes.Contains(keyPEM, []byte("PRIVATE KEY")) {
		return nil, fmt.Errorf("--tls-key '%s' is not a PEM private key", key)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert/--tls-key: %v", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	if clientCA != "" {
		caPEM, err := readPEM(clientCA, "client CA bundle", "--tls-client-ca")
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !bytes.Contains(caPEM, []byte("CERTIFICATE")) || !pool.AppendCertsFromPEM(caPEM) {
			return nil, fmt.Errorf("--tls-client-ca '%s' is not a PEM certificate bundle", clientCA)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// ReadTokenFile: one printable-ASCII token without spaces, surrounding whitespace stripped.
func ReadTokenFile(path string) ([]byte, error) {
	data, err := readPEM(path, "auth token file", "--auth-token-file")
	if err != nil {
		return nil, err
	}
	token := bytes.TrimSpace(data)
	for _, c := range token {
		if c < 0x21 || c > 0x7e {
			return nil, fmt.Errorf("auth token file '%s' must hold one token of printable ASCII without spaces", path)
		}
	}
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o004 != 0 {
		slog.Warn(fmt.Sprintf("auth token file %s is world-readable; chmod 600 it", path))
	}
	return token, nil
}

// TokenMatches: `Bearer <token>` (scheme case-insensitive), compared in constant time.
func TokenMatches(values []string, expected []byte) bool {
	if len(values) == 0 || len(expected) == 0 {
		return false
	}
	header := values[0]
	const bearer = "bearer "
	if len(header) < len(bearer) || strings.ToLower(header[:len(bearer)]) != bearer {
		return false
	}
	presented := []byte(strings.TrimSpace(header[len(bearer):]))
	return subtle.ConstantTimeCompare(presented, expected) == 1
}

// Authorized: nil when method is open or ctx's metadata carries the token, else the
// UNAUTHENTICATED status (logged).
func Authorized(ctx context.Context, method string, token []byte) error {
	if OpenMethods[method] {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	if TokenMatches(md.Get("authorization"), token) {
		return nil
	}
	slog.Info("unauthenticated call refused", "method", method)
	return status.Error(codes.Unauthenticated, UnauthenticatedDetails)
}

// Freer is a request holding buffers a refused call gives back (the front's raw messages).
type Freer interface{ Free() }

// TokenInterceptors refuse a call without the token before its handler runs (the handlers
// have only referenced the request bytes by then, never parsed them).
func TokenInterceptors(token []byte) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if err := Authorized(ctx, info.FullMethod, token); err != nil {
				if m, ok := req.(Freer); ok {
					m.Free()
				}
				return nil, err
			}
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			if err := Authorized(ss.Context(), info.FullMethod, token); err != nil {
				return err
			}
			return h(srv, ss)
		}),
	}
}
