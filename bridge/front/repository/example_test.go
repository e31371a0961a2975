package repository_test

import (
	"fmt"

	"github.com/jaxport/jaxport/bridge/front/repository"
)

// A model reference is checked before it touches the file system: the error is NOT_FOUND,
// naming the rule.
func ExampleVersionNumber() {
	n, latest, _ := repository.VersionNumber("mlp", "")
	fmt.Println(n, latest)
	n, _, _ = repository.VersionNumber("mlp", "12")
	fmt.Println(n)
	_, _, err := repository.VersionNumber("mlp", "01")
	fmt.Println(err)
	fmt.Println(repository.CheckName("../mlp"))
	// Output:
	// 0 true
	// 12
	// rpc error: code = NotFound desc = model 'mlp' has no version '01': not a valid model version (a decimal number of 1 to 19 digits without a leading zero, or empty for the latest)
	// rpc error: code = NotFound desc = unknown model '../mlp': not a valid model name (1 to 255 of the characters A-Z a-z 0-9 _ - ., not starting with '.')
}
