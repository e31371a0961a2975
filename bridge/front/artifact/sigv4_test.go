package artifact

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestSignV4MatchesAWSExamples: the signatures the AWS S3 documentation prints for its
// examples ("Signature Calculations for the Authorization Header: Transferring Payload in a
// Single Chunk": GET Object with a Range header, GET Bucket listing two keys).
func TestSignV4MatchesAWSExamples(t *testing.T) {
	const empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	c := credentials{AccessKeyID: "AKIAIOSFODNN7EXAMPLE", SecretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}
	when := time.Date(2013, 5, 24, 0, 0, 0, 0, time.UTC)
	for url, want := range map[string]string{
		"https://examplebucket.s3.amazonaws.com/test.txt":             "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
		"https://examplebucket.s3.amazonaws.com/?max-keys=2&prefix=J": "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7",
	} {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(url, "test.txt") {
			req.Header.Set("Range", "bytes=0-9")
		}
		signV4(req, c, "us-east-1", "s3", empty, when)
		auth := req.Header.Get("Authorization")
		if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, ") ||
			!strings.HasSuffix(auth, "Signature="+want) {
			t.Errorf("%s: %s, want signature %s", url, auth, want)
		}
	}
	if got := awsEscape("a b/é+$", true); got != "a%20b/%C3%A9%2B%24" {
		t.Errorf("escape %s", got)
	}
}
