package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jaxport/jaxport/clients/go/jaxport"
)

func main() {
	client, err := jaxport.NewClient(os.Args[1], jaxport.WithTLSFiles(os.Args[2], os.Args[3], os.Args[4]),
		jaxport.WithBearerToken(os.Args[5]))
	if err != nil {
		panic(err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ready, err := client.ModelReady(ctx, "echo", "")
	fmt.Println("workspace ready", ready, err)
}
