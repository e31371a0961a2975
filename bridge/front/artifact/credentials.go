package artifact

import (
	"bufio"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Where the credentials of an s3:// store come from (the Python reader's TensorStore
// aws_credentials types, docs/scale-out.md "Repositories by URL"):
//   - environment: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN);
//   - profile: the shared credentials and config files (AWS_SHARED_CREDENTIALS_FILE,
//     AWS_CONFIG_FILE; profile AWS_PROFILE, else "default"), static keys;
//   - ecs: the container credentials endpoint (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or
//     _FULL_URI, AWS_CONTAINER_AUTHORIZATION_TOKEN[_FILE]);
//   - imds: the EC2 instance metadata service (IMDSv2; AWS_EC2_METADATA_SERVICE_ENDPOINT);
//   - default: the standard chain: environment, web identity (AWS_WEB_IDENTITY_TOKEN_FILE +
//     AWS_ROLE_ARN through STS), profile, ecs, imds;
//   - anonymous: unsigned requests (a public bucket).
//
// S3Credentials chooses one as the Python reader does; JAXPORT_S3_CREDENTIALS names one
// outright.
var CredentialTypes = []string{"default", "environment", "profile", "imds", "ecs", "anonymous"}

// keyVars name the environment's key pair; chainVars say the standard chain has something to
// find.
var (
	keyVars   = []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
	chainVars = []string{"AWS_PROFILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
		"AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE"}
)

// credentialsSaid is how an access-denied message names the credentials that were refused.
var credentialsSaid = map[string]string{
	"environment": "the AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY of the environment",
	"default":     "the credentials of the AWS profile chain (AWS_PROFILE, ~/.aws/credentials)",
	"anonymous": "no credentials (unsigned: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, " +
		"or AWS_PROFILE)",
}

// S3Credentials is the credential type for an S3 read in environment getenv: the environment's
// keys, else the standard chain when something configures it, else anonymous (so a machine
// with nothing configured gets one line, not a chain's complaints).
func S3Credentials(getenv func(string) string) string {
	if v := getenv("JAXPORT_S3_CREDENTIALS"); v != "" {
		return v
	}
	if getenv(keyVars[0]) != "" && getenv(keyVars[1]) != "" {
		return "environment"
	}
	for _, v := range chainVars {
		if getenv(v) != "" {
			return "default"
		}
	}
	for _, f := range []string{or(getenv("AWS_SHARED_CREDENTIALS_FILE"), "~/.aws/credentials"),
		or(getenv("AWS_CONFIG_FILE"), "~/.aws/config")} {
		if st, err := os.Stat(expandUser(f, getenv)); err == nil && st.Mode().IsRegular() {
			return "default"
		}
	}
	return "anonymous"
}

func or(v, fallback string) string {
	if v != "" {
		return v
	}
	return fallback
}

func expandUser(path string, getenv func(string) string) string {
	if path == "~" || strings.HasPrefix(path, "~/") {
		home := getenv("HOME")
		if home == "" {
			home, _ = os.UserHomeDir()
		}
		return filepath.Join(home, path[1:])
	}
	return path
}

// credentials are one set of AWS keys; Expires zero: they do not expire.
type credentials struct {
	AccessKeyID, SecretAccessKey, SessionToken string
	Expires                                    time.Time
}

// credentialSource hands out the credentials of one type, fetched once and again shortly
// before they expire.
type credentialSource struct {
	kind   string
	getenv func(string) string
	client *http.Client
	mu     sync.Mutex
	cached *credentials
}

func newCredentialSource(kind string, getenv func(string) string, client *http.Client) (*credentialSource, error) {
	for _, k := range CredentialTypes {
		if k == kind {
			return &credentialSource{kind: kind, getenv: getenv, client: client}, nil
		}
	}
	return nil, errorf(fmt.Sprintf("JAXPORT_S3_CREDENTIALS=%s is not one of %s", kind, strings.Join(CredentialTypes, ", ")))
}

// get is the credentials to sign with; ok false for anonymous (unsigned) requests.
func (s *credentialSource) get(ctx context.Context) (credentials, bool, error) {
	if s.kind == "anonymous" {
		return credentials{}, false, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.cached; c != nil && (c.Expires.IsZero() || time.Until(c.Expires) > 5*time.Minute) {
		return *c, true, nil
	}
	var c credentials
	var err error
	switch s.kind {
	case "environment":
		c, err = s.environment()
	case "profile":
		c, err = s.profile()
	case "ecs":
		c, err = s.ecs(ctx)
	case "imds":
		c, err = s.imds(ctx)
	case "default":
		c, err = s.chain(ctx)
	}
	if err != nil {
		return credentials{}, false, fmt.Errorf("no AWS credentials (%s): %v", s.kind, err)
	}
	s.cached = &c
	return c, true, nil
}

func (s *credentialSource) environment() (credentials, error) {
	c := credentials{AccessKeyID: s.getenv("AWS_ACCESS_KEY_ID"), SecretAccessKey: s.getenv("AWS_SECRET_ACCESS_KEY"),
		SessionToken: s.getenv("AWS_SESSION_TOKEN")}
	if c.AccessKeyID == "" || c.SecretAccessKey == "" {
		return c, errors.New("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not both set")
	}
	return c, nil
}

// chain is the standard order: environment, web identity, profile, container, instance.
func (s *credentialSource) chain(ctx context.Context) (credentials, error) {
	if c, err := s.environment(); err == nil {
		return c, nil
	}
	if s.getenv("AWS_WEB_IDENTITY_TOKEN_FILE") != "" {
		return s.webIdentity(ctx)
	}
	if c, err := s.profile(); err == nil {
		return c, nil
	} else if !errors.Is(err, errNoProfile) {
		return c, err
	}
	if s.getenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") != "" || s.getenv("AWS_CONTAINER_CREDENTIALS_FULL_URI") != "" {
		return s.ecs(ctx)
	}
	c, err := s.imds(ctx)
	if err != nil {
		return c, fmt.Errorf("none in the environment, no web identity, no profile %q in %s, no container "+
			"credentials, instance metadata: %v", s.profileName(), s.credentialsFile(), err)
	}
	return c, nil
}

var errNoProfile = errors.New("no such profile")

func (s *credentialSource) profileName() string {
	return or(s.getenv("AWS_PROFILE"), or(s.getenv("AWS_DEFAULT_PROFILE"), "default"))
}

func (s *credentialSource) credentialsFile() string {
	return expandUser(or(s.getenv("AWS_SHARED_CREDENTIALS_FILE"), "~/.aws/credentials"), s.getenv)
}

// profile reads static keys of the profile from the shared credentials file ([NAME]), then
// the config file ([NAME] for default, [profile NAME] otherwise).
func (s *credentialSource) profile() (credentials, error) {
	name := s.profileName()
	configSection := "profile " + name
	if name == "default" {
		configSection = "default"
	}
	for _, f := range []struct{ path, section string }{
		{s.credentialsFile(), name},
		{expandUser(or(s.getenv("AWS_CONFIG_FILE"), "~/.aws/config"), s.getenv), configSection},
	} {
		keys, err := iniSection(f.path, f.section)
		if err != nil || keys == nil {
			continue
		}
		c := credentials{AccessKeyID: keys["aws_access_key_id"], SecretAccessKey: keys["aws_secret_access_key"],
			SessionToken: keys["aws_session_token"]}
		if c.AccessKeyID != "" && c.SecretAccessKey != "" {
			return c, nil
		}
		if keys["credential_process"] != "" || keys["role_arn"] != "" || keys["sso_session"] != "" || keys["sso_start_url"] != "" {
			return c, fmt.Errorf("profile %q in %s uses credential_process, role_arn or SSO, which this reader "+
				"does not run: give it static keys, or set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY", name, f.path)
		}
	}
	return credentials{}, fmt.Errorf("%w %q with aws_access_key_id and aws_secret_access_key in %s", errNoProfile, name, s.credentialsFile())
}

// iniSection is the key = value pairs of [section] in an INI file (nil: no such section).
func iniSection(path, section string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var keys map[string]string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if line[0] == '[' && strings.HasSuffix(line, "]") {
			in = strings.TrimSpace(line[1:len(line)-1]) == section
			if in && keys == nil {
				keys = map[string]string{}
			}
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok && in {
			keys[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
		}
	}
	return keys, sc.Err()
}

// awsJSONCredentials is what the container and instance metadata endpoints answer.
type awsJSONCredentials struct {
	Code            string `json:"Code"`
	AccessKeyID     string `json:"AccessKeyId"`
	SecretAccessKey string `json:"SecretAccessKey"`
	Token           string `json:"Token"`
	Expiration      string `json:"Expiration"`
}

func (j awsJSONCredentials) credentials(from string) (credentials, error) {
	if j.AccessKeyID == "" || j.SecretAccessKey == "" || (j.Code != "" && j.Code != "Success") {
		return credentials{}, fmt.Errorf("%s answered no credentials (code %q)", from, j.Code)
	}
	c := credentials{AccessKeyID: j.AccessKeyID, SecretAccessKey: j.SecretAccessKey, SessionToken: j.Token}
	if j.Expiration != "" {
		if t, err := time.Parse(time.RFC3339, j.Expiration); err == nil {
			c.Expires = t
		}
	}
	return c, nil
}

// ecs asks the container credentials endpoint (ECS, EKS Pod Identity).
func (s *credentialSource) ecs(ctx context.Context) (credentials, error) {
	endpoint := s.getenv("AWS_CONTAINER_CREDENTIALS_FULL_URI")
	if rel := s.getenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"); rel != "" {
		endpoint = "http://169.254.170.2" + rel
	}
	if endpoint == "" {
		return credentials{}, errors.New("neither AWS_CONTAINER_CREDENTIALS_RELATIVE_URI nor _FULL_URI is set")
	}
	token := s.getenv("AWS_CONTAINER_AUTHORIZATION_TOKEN")
	if file := s.getenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"); file != "" {
		raw, err := os.ReadFile(file)
		if err != nil {
			return credentials{}, err
		}
		token = strings.TrimSpace(string(raw))
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	if err != nil {
		return credentials{}, err
	}
	if token != "" {
		req.Header.Set("Authorization", token)
	}
	var j awsJSONCredentials
	if err := s.getJSON(req, &j); err != nil {
		return credentials{}, fmt.Errorf("container credentials %s: %v", endpoint, err)
	}
	return j.credentials(endpoint)
}

// imds asks the EC2 instance metadata service (IMDSv2: a session token first).
func (s *credentialSource) imds(ctx context.Context) (credentials, error) {
	if strings.EqualFold(s.getenv("AWS_EC2_METADATA_DISABLED"), "true") {
		return credentials{}, errors.New("AWS_EC2_METADATA_DISABLED=true")
	}
	base := strings.TrimRight(or(s.getenv("AWS_EC2_METADATA_SERVICE_ENDPOINT"), "http://169.254.169.254"), "/")
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, base+"/latest/api/token", nil)
	if err != nil {
		return credentials{}, err
	}
	req.Header.Set("X-Aws-Ec2-Metadata-Token-Ttl-Seconds", "21600")
	token, err := s.getText(req)
	if err != nil {
		return credentials{}, fmt.Errorf("instance metadata %s: %v", base, err)
	}
	get := func(path string) (*http.Request, error) {
		r, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err == nil {
			r.Header.Set("X-Aws-Ec2-Metadata-Token", token)
		}
		return r, err
	}
	const roles = "/latest/meta-data/iam/security-credentials/"
	req, err = get(roles)
	if err != nil {
		return credentials{}, err
	}
	role, err := s.getText(req)
	if err != nil {
		return credentials{}, fmt.Errorf("instance metadata %s: no instance role: %v", base, err)
	}
	role, _, _ = strings.Cut(strings.TrimSpace(role), "\n")
	if req, err = get(roles + url.PathEscape(role)); err != nil {
		return credentials{}, err
	}
	var j awsJSONCredentials
	if err := s.getJSON(req, &j); err != nil {
		return credentials{}, fmt.Errorf("instance metadata %s: role %s: %v", base, role, err)
	}
	return j.credentials("instance metadata role " + role)
}

// webIdentity exchanges the token file's web identity token for the role's credentials
// (STS AssumeRoleWithWebIdentity, an unsigned call): EKS IRSA.
func (s *credentialSource) webIdentity(ctx context.Context) (credentials, error) {
	tokenFile, role := s.getenv("AWS_WEB_IDENTITY_TOKEN_FILE"), s.getenv("AWS_ROLE_ARN")
	if role == "" {
		return credentials{}, errors.New("AWS_WEB_IDENTITY_TOKEN_FILE is set but AWS_ROLE_ARN is not")
	}
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		return credentials{}, fmt.Errorf("web identity token: %v", err)
	}
	endpoint := or(s.getenv("AWS_ENDPOINT_URL_STS"), s.getenv("AWS_ENDPOINT_URL"))
	if endpoint == "" {
		endpoint = "https://sts.amazonaws.com"
		if region := or(s.getenv("AWS_REGION"), s.getenv("AWS_DEFAULT_REGION")); region != "" {
			endpoint = "https://sts." + region + ".amazonaws.com"
		}
	}
	form := url.Values{"Action": {"AssumeRoleWithWebIdentity"}, "Version": {"2011-06-15"},
		"RoleArn": {role}, "RoleSessionName": {or(s.getenv("AWS_ROLE_SESSION_NAME"), "jaxport-"+strconv.FormatInt(time.Now().Unix(), 10))},
		"WebIdentityToken": {strings.TrimSpace(string(token))}}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(endpoint, "/")+"/", strings.NewReader(form.Encode()))
	if err != nil {
		return credentials{}, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	body, err := s.getText(req)
	if err != nil {
		return credentials{}, fmt.Errorf("STS %s AssumeRoleWithWebIdentity %s: %v", endpoint, role, err)
	}
	var out struct {
		Result struct {
			Credentials struct {
				AccessKeyID     string `xml:"AccessKeyId"`
				SecretAccessKey string `xml:"SecretAccessKey"`
				SessionToken    string `xml:"SessionToken"`
				Expiration      string `xml:"Expiration"`
			} `xml:"Credentials"`
		} `xml:"AssumeRoleWithWebIdentityResult"`
	}
	if err := xml.Unmarshal([]byte(body), &out); err != nil {
		return credentials{}, fmt.Errorf("STS %s: answer is not XML: %v", endpoint, err)
	}
	j := out.Result.Credentials
	return awsJSONCredentials{AccessKeyID: j.AccessKeyID, SecretAccessKey: j.SecretAccessKey, Token: j.SessionToken,
		Expiration: j.Expiration}.credentials("STS " + endpoint)
}

func (s *credentialSource) getText(req *http.Request) (string, error) {
	resp, err := s.client.Do(req)
	if err != nil {
		return "", errors.New(reason(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("HTTP %s: %s", resp.Status, clipText(strings.TrimSpace(string(body)), 200))
	}
	return string(body), nil
}

func (s *credentialSource) getJSON(req *http.Request, v any) error {
	body, err := s.getText(req)
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		return fmt.Errorf("answer is not JSON: %v", err)
	}
	return nil
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
