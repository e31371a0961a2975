module github.com/jaxport/jaxport/bridge/front

go 1.26.0

require (
	github.com/jaxport/jaxport/clients/go v0.0.0
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/gomlx/gopjrt v0.10.0
	github.com/pkg/errors v0.9.1 // indirect
	github.com/x448/float16 v0.8.4 // indirect
	k8s.io/klog/v2 v2.130.1 // indirect
)

require (
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
)

replace github.com/jaxport/jaxport/clients/go => ../../clients/go
