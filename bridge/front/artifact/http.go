package artifact

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Retries of a failing read over HTTP or S3 (a dead server is an error after them, not a
// hang), as the Python reader configures TensorStore: 3 retries, 50 ms doubling to 1 s.
const (
	Retries      = 3
	retryInitial = 50 * time.Millisecond
	retryMax     = time.Second
)

// newTransport is http.DefaultTransport with enough idle connections per host for the engine's
// parallel chunk reads.
func newTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 32
	t.ResponseHeaderTimeout = 60 * time.Second
	return t
}

// httpStore is a directory served over HTTP(S) (url ends with one slash). The path rule is
// CheckRelative; every key is percent-encoded segment by segment, so no manifest path leaves
// the URL's prefix.
type httpStore struct {
	url    string
	client *http.Client
}

func newHTTPStore(raw string, client *http.Client) (*httpStore, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errorf(pyRepr(raw) + " is not an http(s)://HOST/... URL")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, errorf(pyRepr(raw) + ": a repository or artifact URL takes no ?query or #fragment")
	}
	return &httpStore{url: u.Scheme + "://" + u.Host + strings.TrimRight(u.EscapedPath(), "/") + "/", client: client}, nil
}

func (s *httpStore) String() string { return s.Display("") }

func (s *httpStore) Display(rel string) string {
	if rel == "" {
		return strings.TrimRight(s.url, "/")
	}
	return s.url + rel
}

func (s *httpStore) Local() string { return "" }

func (s *httpStore) Resolve(rel, what string) error { return CheckRelative(rel, what) }

func (s *httpStore) Child(rel string) (Store, error) {
	if err := CheckRelative(rel, "'"+rel+"'"); err != nil {
		return nil, err
	}
	return &httpStore{url: s.url + escapeKey(strings.Trim(rel, "/")) + "/", client: s.client}, nil
}

func (s *httpStore) Open(ctx context.Context, rel string) (io.ReadCloser, int64, error) {
	if err := CheckRelative(rel, "'"+rel+"'"); err != nil {
		return nil, 0, err
	}
	resp, err := fetch(ctx, s.client, func() (*http.Request, error) {
		return http.NewRequestWithContext(ctx, http.MethodGet, s.url+escapeKey(rel), nil)
	})
	if err != nil {
		return nil, 0, readFailure(s, rel, err)
	}
	switch {
	case resp.StatusCode == http.StatusOK:
		return resp.Body, resp.ContentLength, nil
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		drain(resp)
		return nil, 0, notExist(s, rel)
	default:
		drain(resp)
		return nil, 0, errorf(fmt.Sprintf("%s: cannot read: HTTP %s", s.Display(rel), resp.Status))
	}
}

// escapeKey percent-encodes each segment of a key (`%`, `?`, `#` included), keeping the
// slashes between them.
func escapeKey(rel string) string {
	parts := strings.Split(rel, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

// fetch sends the request build makes, again after a connection failure or a 5xx/429 answer
// (Retries times, backing off), and returns the last answer or error.
func fetch(ctx context.Context, client *http.Client, build func() (*http.Request, error)) (*http.Response, error) {
	delay := retryInitial
	for attempt := 0; ; attempt++ {
		req, err := build()
		if err != nil {
			return nil, err
		}
		resp, err := client.Do(req)
		retry := false
		switch {
		case err != nil:
			retry = ctx.Err() == nil && transient(err)
		case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
			retry = true
		}
		if !retry || attempt >= Retries {
			if err != nil && ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return resp, err
		}
		if resp != nil {
			drain(resp)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, retryMax)
	}
}

// transient: a failure another attempt may not meet (connection refused or reset, timeout).
func transient(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}
