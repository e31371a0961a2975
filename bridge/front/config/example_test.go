package config_test

import (
	"fmt"

	"github.com/jaxport/jaxport/bridge/front/config"
)

func ExampleParse() {
	c, err := config.Parse("jaxport serve",
		[]string{"--repository", "repo", "--port", "0", "--model-control-mode", "explicit", "--load-model", "*"},
		[]string{"JAXPORT_WORKERS=2", "JAXPORT_PORT=9000"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(c.Repository, c.Port, c.HTTPPort, c.Workers, c.ModelControlMode, c.LoadModels)
	// Output: repo 0 0 2 explicit [*]
}

func ExampleExitCode() {
	_, err := config.Parse("jaxport serve", []string{"--repository", "repo", "--port", "70000"}, nil)
	fmt.Printf("%d %v\n", config.ExitCode(err), err)
	_, err = config.Parse("jaxport serve", []string{"--repository", "repo", "--worker-python", "/no/python"}, nil)
	fmt.Printf("%d %v\n", config.ExitCode(err), err)
	// Output:
	// 2 --port must be in 0..65535, got 70000
	// 1 --worker-python /no/python: no such file
}

func ExampleConfig_BatchingFor() {
	c, _ := config.Parse("jaxport serve", []string{"--repository", "repo", "--batching-models", "mlp:2000:8+32,ranker"}, nil)
	for _, model := range []string{"mlp", "ranker", "other"} {
		delay, sizes, ok := c.BatchingFor(model)
		fmt.Println(model, delay, sizes, ok)
	}
	// Output:
	// mlp 2000 [8 32] true
	// ranker 1000 [] true
	// other 0 [] false
}
