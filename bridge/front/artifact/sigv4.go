package artifact

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"
)

// AWS Signature Version 4 for the requests an S3 store sends (GET of an object; the tests' PUT):
// the canonical request of the method, the path (each segment encoded as AWS encodes it), the
// query, the signed headers (host, x-amz-content-sha256, x-amz-date, x-amz-security-token with
// a session token) and the payload hash, signed with the key derived from the secret, date,
// region and service. https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_sigv-create-signed-request.html

// unsignedPayload is S3's payload hash for a request whose body is not signed.
const unsignedPayload = "UNSIGNED-PAYLOAD"

const amzDateFormat = "20060102T150405Z"

// SignV4 signs req for service in region with the key pair (and session token, "" for none):
// what an S3 store does to every request it sends, exported for tools and tests that talk to
// the same servers (the tests' uploads to an S3-compatible server).
func SignV4(req *http.Request, accessKeyID, secretAccessKey, sessionToken, region, service, payloadHash string) {
	signV4(req, credentials{AccessKeyID: accessKeyID, SecretAccessKey: secretAccessKey, SessionToken: sessionToken},
		region, service, payloadHash, time.Now())
}

// UnsignedPayload is S3's payload hash for a request whose body is not signed.
const UnsignedPayload = unsignedPayload

// signV4 adds x-amz-date, x-amz-content-sha256 (payloadHash), the session token and the
// Authorization header to req.
func signV4(req *http.Request, c credentials, region, service, payloadHash string, now time.Time) {
	now = now.UTC()
	amzDate := now.Format(amzDateFormat)
	day := amzDate[:8]
	req.Header.Set("X-Amz-Date", amzDate)
	req.Header.Set("X-Amz-Content-Sha256", payloadHash)
	if c.SessionToken != "" {
		req.Header.Set("X-Amz-Security-Token", c.SessionToken)
	}
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	headers := map[string]string{"host": host}
	for name, values := range req.Header {
		lower := strings.ToLower(name)
		if strings.HasPrefix(lower, "x-amz-") || lower == "content-type" || lower == "content-md5" || lower == "range" {
			headers[lower] = strings.Join(strings.Fields(strings.Join(values, ",")), " ")
		}
	}
	names := make([]string, 0, len(headers))
	for n := range headers {
		names = append(names, n)
	}
	sort.Strings(names)
	var canonHeaders strings.Builder
	for _, n := range names {
		canonHeaders.WriteString(n + ":" + headers[n] + "\n")
	}
	signed := strings.Join(names, ";")
	canonical := strings.Join([]string{
		req.Method,
		canonicalPath(req.URL.EscapedPath()),
		canonicalQuery(req.URL.Query()),
		canonHeaders.String(),
		signed,
		payloadHash,
	}, "\n")
	scope := day + "/" + region + "/" + service + "/aws4_request"
	sum := sha256.Sum256([]byte(canonical))
	toSign := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope + "\n" + hex.EncodeToString(sum[:])
	key := hmacSHA256([]byte("AWS4"+c.SecretAccessKey), day)
	key = hmacSHA256(key, region)
	key = hmacSHA256(key, service)
	key = hmacSHA256(key, "aws4_request")
	signature := hex.EncodeToString(hmacSHA256(key, toSign))
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential="+c.AccessKeyID+"/"+scope+
		", SignedHeaders="+signed+", Signature="+signature)
}

func hmacSHA256(key []byte, data string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(data))
	return h.Sum(nil)
}

// awsEscape is AWS's URI encoding: everything but the unreserved A-Z a-z 0-9 - _ . ~ as %XX
// (upper-case hex); slashes too unless keepSlash.
func awsEscape(s string, keepSlash bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_', c == '.', c == '~':
			b.WriteByte(c)
		case c == '/' && keepSlash:
			b.WriteByte(c)
		default:
			const hexDigits = "0123456789ABCDEF"
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
		}
	}
	return b.String()
}

// canonicalPath is the request path as S3 canonicalizes it: decoded once, then each segment
// AWS-encoded (S3 does not normalize or double-encode).
func canonicalPath(escaped string) string {
	if escaped == "" {
		return "/"
	}
	parts := strings.Split(escaped, "/")
	for i, p := range parts {
		if dec, err := url.PathUnescape(p); err == nil {
			p = dec
		}
		parts[i] = awsEscape(p, false)
	}
	return strings.Join(parts, "/")
}

func canonicalQuery(q map[string][]string) string {
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		vs := append([]string(nil), q[k]...)
		sort.Strings(vs)
		for _, v := range vs {
			parts = append(parts, awsEscape(k, false)+"="+awsEscape(v, false))
		}
	}
	return strings.Join(parts, "&")
}
