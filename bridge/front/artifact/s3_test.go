package artifact_test

import (
	"errors"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jaxport/jaxport/bridge/front/artifact"
	"github.com/jaxport/jaxport/bridge/front/artifact/artifacttest"
)

// s3Repo uploads a copy of the back-compat artifact to bucket as <prefix>/m/1/ and returns
// the local copy.
func s3Repo(t *testing.T, m *artifacttest.Moto, bucket, prefix string) string {
	t.Helper()
	dir := copied(t)
	m.CreateBucket(t, bucket)
	m.Upload(t, bucket, prefix, filepath.Dir(filepath.Dir(dir)))
	return dir
}

func locateWith(t *testing.T, url string, env map[string]string) artifact.Store {
	t.Helper()
	s, err := artifact.Locate(url, artifact.WithEnv(artifacttest.Getenv(env)))
	must(t, err)
	return s
}

func TestS3StoreReadsAndVerifiesLikeTheLocalOne(t *testing.T) {
	m := artifacttest.SharedMoto(t)
	dir := s3Repo(t, m, "models", "repo")
	s := locateWith(t, "s3://models/repo/m/1", m.Env())
	if s.Display("") != "s3://models/repo/m/1" || s.Display("x") != "s3://models/repo/m/1/x" {
		t.Fatalf("display %q", s.Display(""))
	}
	a, err := artifact.Open(ctx, s)
	must(t, err)
	must(t, a.VerifyFiles(ctx, nil))
	local, err := openDir(t, dir)
	must(t, err)
	if a.Manifest.String() != local.Manifest.String() {
		t.Fatal("manifests differ")
	}
	_, _, err = s.Open(ctx, "no/such/key")
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing key: %v", err)
	}

	chunk := artifacttest.FirstChunk(t, dir)
	artifacttest.FlipByte(t, filepath.Join(dir, chunk))
	data, _ := os.ReadFile(filepath.Join(dir, chunk))
	m.Put(t, "models", "repo/m/1/"+chunk, data)
	onDisk := local.VerifyFiles(ctx, nil)
	byURL := a.VerifyFiles(ctx, nil)
	if onDisk == nil || byURL == nil || remoteMessage(onDisk, dir) != remoteMessage(byURL, "s3://models/repo/m/1") {
		t.Fatalf("on disk %v, in S3 %v", onDisk, byURL)
	}
	if !strings.Contains(byURL.Error(), chunk+": sha256 mismatch") {
		t.Fatal(byURL)
	}
}

func TestS3MissingBucketAndRefusedCredentialsAreOneLine(t *testing.T) {
	m := artifacttest.SharedMoto(t)
	s3Repo(t, m, "private", "repo")
	_, err := artifact.Open(ctx, locateWith(t, "s3://no-such-bucket/repo/m/1", m.Env()))
	wantError(t, err, "s3://no-such-bucket/repo/m/1/manifest.json: no such bucket 'no-such-bucket' at "+m.Endpoint)
	noKeys := map[string]string{"AWS_ENDPOINT_URL_S3": m.Endpoint, "AWS_REGION": artifacttest.Region}
	_, err = artifact.Open(ctx, locateWith(t, "s3://private/repo/m/1", noKeys))
	wantError(t, err, "s3://private/repo/m/1/manifest.json: cannot read: access denied (HTTP 403) to bucket 'private' "+
		"with no credentials (unsigned: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)")
}

func TestS3CredentialsFromAProfileFile(t *testing.T) {
	m := artifacttest.SharedMoto(t)
	s3Repo(t, m, "profiled", "r")
	file := filepath.Join(t.TempDir(), "credentials")
	must(t, os.WriteFile(file, []byte("[other]\naws_access_key_id = x\n\n[ci]\naws_access_key_id = "+artifacttest.AccessKey+
		"\naws_secret_access_key = "+artifacttest.SecretKey+"\n"), 0o600))
	env := map[string]string{"AWS_ENDPOINT_URL": m.Endpoint, "AWS_DEFAULT_REGION": artifacttest.Region,
		"AWS_SHARED_CREDENTIALS_FILE": file, "AWS_PROFILE": "ci"}
	if got := artifact.S3Credentials(artifacttest.Getenv(env)); got != "default" {
		t.Fatalf("credentials %s", got)
	}
	a, err := artifact.Open(ctx, locateWith(t, "s3://profiled/r/m/1", env))
	must(t, err)
	must(t, a.VerifyFiles(ctx, nil))
	env["AWS_PROFILE"] = "missing"
	_, err = artifact.Open(ctx, locateWith(t, "s3://profiled/r/m/1", env))
	wantPrefix(t, err, "s3://profiled/r/m/1/manifest.json: cannot read: no AWS credentials (default): ")
}

func TestS3URLsAndCredentialChoice(t *testing.T) {
	for _, bad := range []string{"s3://Upper/x", "s3://ab/x", "s3:///x"} {
		_, err := artifact.Locate(bad)
		wantError(t, err, "'"+bad+"' is not an s3://BUCKET/PREFIX URL (a bucket name is 3-63 lower-case letters, digits, "+
			"dots and hyphens)")
	}
	_, err := artifact.Locate("s3://bucket/repo?versionId=1")
	wantError(t, err, "'s3://bucket/repo?versionId=1': a repository or artifact URL takes no ?query or #fragment")
	_, err = artifact.Locate("s3://bucket/a/../b")
	wantError(t, err, "'s3://bucket/a/../b': path 'a/../b' contains '..'; refused")
	s, err := artifact.Locate("s3://bucket/a/b/", artifact.WithEnv(artifacttest.Getenv(nil)))
	must(t, err)
	child, err := s.Child("m")
	must(t, err)
	if s.Display("") != "s3://bucket/a/b" || s.Display("m/1") != "s3://bucket/a/b/m/1" || child.Display("") != "s3://bucket/a/b/m" {
		t.Fatalf("%q %q %q", s.Display(""), s.Display("m/1"), child.Display(""))
	}
	_, err = artifact.Locate("s3://bucket/x", artifact.WithEnv(artifacttest.Getenv(map[string]string{"JAXPORT_S3_CREDENTIALS": "magic"})))
	wantError(t, err, "JAXPORT_S3_CREDENTIALS=magic is not one of default, environment, profile, imds, ecs, anonymous")

	keys := map[string]string{"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}
	for want, env := range map[string]map[string]string{
		"environment": keys,
		"anonymous":   {"AWS_ACCESS_KEY_ID": "k"},
		"default":     {"AWS_PROFILE": "ci"},
		"imds":        {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "JAXPORT_S3_CREDENTIALS": "imds"},
	} {
		if got := artifact.S3Credentials(artifacttest.Getenv(env)); got != want {
			t.Errorf("%v: %s, want %s", env, got, want)
		}
	}
	if got := artifact.S3Credentials(artifacttest.Getenv(nil)); got != "anonymous" {
		t.Errorf("nothing configured: %s", got)
	}
}

// TestS3CredentialsFromContainerInstanceAndWebIdentity: the credential endpoints of ECS/EKS
// (a container credentials server), EC2 (IMDSv2: a session token, the role, its keys) and STS
// (AssumeRoleWithWebIdentity, moto's own) hand out the keys the reads are signed with.
func TestS3CredentialsFromContainerInstanceAndWebIdentity(t *testing.T) {
	m := artifacttest.SharedMoto(t)
	s3Repo(t, m, "creds", "r")
	keys := `{"AccessKeyId": "` + artifacttest.AccessKey + `", "SecretAccessKey": "` + artifacttest.SecretKey +
		`", "Token": "session", "Expiration": "2999-01-01T00:00:00Z"}`
	ecs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "pod-token" {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte(keys))
	}))
	defer ecs.Close()
	imds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPut && r.URL.Path == "/latest/api/token":
			_, _ = w.Write([]byte("imds-token"))
		case r.Header.Get("X-Aws-Ec2-Metadata-Token") != "imds-token":
			http.Error(w, "no token", http.StatusUnauthorized)
		case r.URL.Path == "/latest/meta-data/iam/security-credentials/":
			_, _ = w.Write([]byte("serving-role\n"))
		case r.URL.Path == "/latest/meta-data/iam/security-credentials/serving-role":
			_, _ = w.Write([]byte(`{"Code": "Success", ` + keys[1:]))
		default:
			http.NotFound(w, r)
		}
	}))
	defer imds.Close()
	token := filepath.Join(t.TempDir(), "token")
	must(t, os.WriteFile(token, []byte("a-web-identity-token"), 0o600))
	base := map[string]string{"AWS_ENDPOINT_URL_S3": m.Endpoint, "AWS_REGION": artifacttest.Region}
	with := func(extra map[string]string) map[string]string {
		env := map[string]string{}
		for k, v := range base {
			env[k] = v
		}
		for k, v := range extra {
			env[k] = v
		}
		return env
	}
	for name, env := range map[string]map[string]string{
		"ecs": with(map[string]string{"AWS_CONTAINER_CREDENTIALS_FULL_URI": ecs.URL + "/creds",
			"AWS_CONTAINER_AUTHORIZATION_TOKEN": "pod-token"}),
		"imds": with(map[string]string{"JAXPORT_S3_CREDENTIALS": "imds", "AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.URL}),
		"web identity": with(map[string]string{"AWS_WEB_IDENTITY_TOKEN_FILE": token,
			"AWS_ROLE_ARN": "arn:aws:iam::123456789012:role/serving", "AWS_ENDPOINT_URL_STS": m.Endpoint}),
	} {
		t.Run(name, func(t *testing.T) {
			a, err := artifact.Open(ctx, locateWith(t, "s3://creds/r/m/1", env))
			must(t, err)
			must(t, a.VerifyFiles(ctx, nil))
		})
	}
	_, err := artifact.Open(ctx, locateWith(t, "s3://creds/r/m/1", with(map[string]string{
		"AWS_CONTAINER_CREDENTIALS_FULL_URI": ecs.URL + "/creds"})))
	wantPrefix(t, err, "s3://creds/r/m/1/manifest.json: cannot read: no AWS credentials (default): container credentials "+
		ecs.URL+"/creds: HTTP 401 Unauthorized")
}
