package artifact

import (
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"
)

// s3Store is a directory in an S3 bucket (s3://BUCKET/PREFIX), every object read with a GET
// signed with AWS Signature Version 4 (credentials.go: the standard AWS environment), the
// region from AWS_REGION or AWS_DEFAULT_REGION (else asked of the bucket), an S3-compatible
// server (MinIO, moto...) through the AWS SDKs' endpoint override AWS_ENDPOINT_URL_S3 or
// AWS_ENDPOINT_URL (path-style requests). The path rule is CheckRelative; keys are encoded
// segment by segment, so no manifest path leaves the prefix.
type s3Store struct {
	bucket, prefix string // prefix "" or ending with "/"
	url            string // s3://bucket/prefix
	endpoint       string // the override, "" for AWS itself
	creds          *credentialSource
	client         *http.Client
	region         *regionOnce
}

// regionOnce is the bucket's region: configured, or asked of AWS once (shared by children).
type regionOnce struct {
	mu     sync.Mutex
	region string
}

// bucketRule is AWS's rule for bucket names: 3-63 lower-case letters, digits, dots, hyphens.
var bucketRule = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// AWSEndpointVars are the AWS SDKs' endpoint overrides, S3's own first.
var AWSEndpointVars = []string{"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"}

func newS3Store(raw string, getenv func(string) string, client *http.Client) (*s3Store, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "s3" || !bucketRule.MatchString(u.Host) {
		return nil, errorf(pyRepr(raw) + " is not an s3://BUCKET/PREFIX URL (a bucket name is 3-63 " +
			"lower-case letters, digits, dots and hyphens)")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, errorf(pyRepr(raw) + ": a repository or artifact URL takes no ?query or #fragment")
	}
	s := &s3Store{bucket: u.Host, client: client}
	if p := strings.Trim(u.Path, "/"); p != "" {
		if err := CheckRelative(p, pyRepr(raw)); err != nil {
			return nil, err
		}
		s.prefix = p + "/"
	}
	s.url = "s3://" + s.bucket + "/" + s.prefix
	for _, v := range AWSEndpointVars {
		if e := getenv(v); e != "" {
			s.endpoint = strings.TrimRight(e, "/")
			break
		}
	}
	s.region = &regionOnce{region: or(getenv("AWS_REGION"), getenv("AWS_DEFAULT_REGION"))}
	if s.region.region == "" && s.endpoint != "" {
		s.region.region = "us-east-1" // an S3-compatible server: any region signs
	}
	if s.creds, err = newCredentialSource(S3Credentials(getenv), getenv, client); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *s3Store) String() string { return s.Display("") }

func (s *s3Store) Display(rel string) string {
	if rel == "" {
		return strings.TrimRight(s.url, "/")
	}
	return s.url + rel
}

func (s *s3Store) Local() string { return "" }

func (s *s3Store) Resolve(rel, what string) error { return CheckRelative(rel, what) }

func (s *s3Store) Child(rel string) (Store, error) {
	if err := CheckRelative(rel, "'"+rel+"'"); err != nil {
		return nil, err
	}
	c := *s
	c.prefix = s.prefix + strings.Trim(rel, "/") + "/"
	c.url = "s3://" + s.bucket + "/" + c.prefix
	return &c, nil
}

// objectURL is where key is: path-style under an endpoint override (and for dotted bucket
// names on AWS), virtual-hosted on AWS.
func (s *s3Store) objectURL(region, key string) string {
	switch {
	case s.endpoint != "":
		return s.endpoint + "/" + s.bucket + "/" + awsEscape(key, true)
	case strings.Contains(s.bucket, "."):
		return "https://s3." + region + ".amazonaws.com/" + s.bucket + "/" + awsEscape(key, true)
	default:
		return "https://" + s.bucket + ".s3." + region + ".amazonaws.com/" + awsEscape(key, true)
	}
}

// bucketRegion is the configured region, else the one AWS answers for the bucket (the
// x-amz-bucket-region header of a HEAD on it, which S3 sends even when refusing the request).
func (s *s3Store) bucketRegion(ctx context.Context) (string, error) {
	s.region.mu.Lock()
	defer s.region.mu.Unlock()
	if s.region.region != "" {
		return s.region.region, nil
	}
	resp, err := fetch(ctx, s.client, func() (*http.Request, error) {
		return http.NewRequestWithContext(ctx, http.MethodHead, "https://"+s.bucket+".s3.amazonaws.com/", nil)
	})
	if err != nil {
		return "", fmt.Errorf("the bucket's region (set AWS_REGION): %s", reason(err))
	}
	drain(resp)
	region := resp.Header.Get("X-Amz-Bucket-Region")
	if region == "" {
		if resp.StatusCode == http.StatusNotFound {
			return "", errNoSuchBucket
		}
		return "", fmt.Errorf("the bucket's region: AWS answered HTTP %s without one (set AWS_REGION)", resp.Status)
	}
	s.region.region = region
	return region, nil
}

var errNoSuchBucket = fmt.Errorf("NoSuchBucket")

// s3Error is the body of an S3 error answer.
type s3Error struct {
	Code    string `xml:"Code"`
	Message string `xml:"Message"`
	Region  string `xml:"Region"`
}

func (s *s3Store) Open(ctx context.Context, rel string) (io.ReadCloser, int64, error) {
	if err := CheckRelative(rel, "'"+rel+"'"); err != nil {
		return nil, 0, err
	}
	region, err := s.bucketRegion(ctx)
	if err == errNoSuchBucket {
		return nil, 0, s.noSuchBucket(rel)
	}
	if err != nil {
		return nil, 0, withCause(fmt.Sprintf("%s: cannot read: %v", s.Display(rel), err), err)
	}
	key := s.prefix + rel
	resp, err := fetch(ctx, s.client, func() (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.objectURL(region, key), nil)
		if err != nil {
			return nil, err
		}
		c, signed, err := s.creds.get(ctx)
		if err != nil {
			return nil, err
		}
		if signed {
			signV4(req, c, region, "s3", unsignedPayload, time.Now())
		}
		return req, nil
	})
	if err != nil {
		return nil, 0, withCause(fmt.Sprintf("%s: cannot read: %s", s.Display(rel), reason(err)), err)
	}
	if resp.StatusCode == http.StatusOK {
		return resp.Body, resp.ContentLength, nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	var e s3Error
	_ = xml.Unmarshal(body, &e)
	switch {
	case e.Code == "NoSuchBucket":
		return nil, 0, s.noSuchBucket(rel)
	case resp.StatusCode == http.StatusNotFound:
		return nil, 0, notExist(s, rel)
	case resp.StatusCode == http.StatusForbidden:
		said, ok := credentialsSaid[s.creds.kind]
		if !ok {
			said = "JAXPORT_S3_CREDENTIALS=" + s.creds.kind
		}
		return nil, 0, errorf(fmt.Sprintf("%s: cannot read: access denied (HTTP 403) to bucket '%s' with %s",
			s.Display(rel), s.bucket, said))
	case resp.StatusCode == http.StatusMovedPermanently || e.Code == "PermanentRedirect" || e.Code == "AuthorizationHeaderMalformed":
		where := or(resp.Header.Get("X-Amz-Bucket-Region"), e.Region)
		return nil, 0, errorf(fmt.Sprintf("%s: cannot read: bucket '%s' is in region %s, not %s (set AWS_REGION)",
			s.Display(rel), s.bucket, or(where, "another region"), region))
	default:
		what := resp.Status
		if e.Code != "" {
			what += " " + e.Code
			if e.Message != "" {
				what += ": " + e.Message
			}
		}
		return nil, 0, errorf(fmt.Sprintf("%s: cannot read: HTTP %s", s.Display(rel), what))
	}
}

func (s *s3Store) noSuchBucket(rel string) error {
	at := ""
	if s.endpoint != "" {
		at = " at " + s.endpoint
	}
	return errorf(fmt.Sprintf("%s: no such bucket '%s'%s", s.Display(rel), s.bucket, at))
}
