package artifact_test

import (
	"fmt"

	"github.com/jaxport/jaxport/bridge/front/artifact"
)

// Every path a manifest names goes through the one path rule.
func ExampleCheckRelative() {
	fmt.Println(artifact.CheckRelative("weights/params.w1/c/0/0", "files[]"))
	fmt.Println(artifact.CheckRelative("../../etc/passwd", "programs[0].mlirbc_file"))
	fmt.Println(artifact.CheckRelative("/etc/passwd", "files[]"))
	// Output:
	// <nil>
	// programs[0].mlirbc_file: path '../../etc/passwd' contains '..'; refused
	// files[]: path '/etc/passwd' is not a relative path inside the artifact
}

// Where an artifact or a repository is: a directory, or a URL.
func ExampleLocate() {
	for _, where := range []string{"repo/mlp/1", "file:///srv/repo", "https://models.example.com/repo/", "s3://models/repo", "gs://b/r"} {
		s, err := artifact.Locate(where, artifact.WithEnv(func(string) string { return "" }))
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Printf("%s local=%q\n", s.Display("index.json"), s.Local())
	}
	// Output:
	// repo/mlp/1/index.json local="repo/mlp/1"
	// /srv/repo/index.json local="/srv/repo"
	// https://models.example.com/repo/index.json local=""
	// s3://models/repo/index.json local=""
	// 'gs://b/r': gs:// is not supported (supported: a local path, file://, http://, https://, s3://); copy the artifacts to a local directory, serve them over HTTP or put them in S3
}
