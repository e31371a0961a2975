package server

// Shared memory: Triton's system_shared_memory extension (package shm; off unless
// --system-shared-memory), and CUDA shared memory answered as a Triton built without GPU
// support (no region can be registered; status lists none; unregistering is a no-op).

import (
	"github.com/jaxport/jaxport/bridge/front/shm"
	"github.com/jaxport/jaxport/bridge/front/status"
	inferencepb "github.com/jaxport/jaxport/clients/go/gen/inference"
	"google.golang.org/grpc/codes"
)

const noCUDA = "this server has no CUDA devices"

func (s *Service) registry(what string) (*shm.Registry, error) {
	if s.o.SharedMemory == nil {
		return nil, shm.DisabledError(what)
	}
	return s.o.SharedMemory, nil
}

// SystemSharedMemoryStatus: one region (NOT_FOUND if unknown) or every region.
func (s *Service) SystemSharedMemoryStatus(name string) (*inferencepb.SystemSharedMemoryStatusResponse, error) {
	r, err := s.registry("SystemSharedMemoryStatus")
	if err != nil {
		return nil, err
	}
	regions, err := r.Status(name)
	if err != nil {
		return nil, err
	}
	out := &inferencepb.SystemSharedMemoryStatusResponse{Regions: map[string]*inferencepb.SystemSharedMemoryStatusResponse_RegionStatus{}}
	for _, g := range regions {
		out.Regions[g.Name] = &inferencepb.SystemSharedMemoryStatusResponse_RegionStatus{Name: g.Name, Key: g.Key,
			Offset: g.Offset, ByteSize: g.ByteSize}
	}
	return out, nil
}

// SystemSharedMemoryRegister maps a region of a /dev/shm object under a name.
func (s *Service) SystemSharedMemoryRegister(req *inferencepb.SystemSharedMemoryRegisterRequest) error {
	r, err := s.registry("SystemSharedMemoryRegister")
	if err != nil {
		return err
	}
	return r.Register(req.GetName(), req.GetKey(), req.GetOffset(), req.GetByteSize())
}

// SystemSharedMemoryUnregister forgets one region ("" = all); an unknown name is no error.
func (s *Service) SystemSharedMemoryUnregister(name string) error {
	r, err := s.registry("SystemSharedMemoryUnregister")
	if err != nil {
		return err
	}
	r.Unregister(name)
	return nil
}

// CudaSharedMemoryStatus: none registered; a named region is not held (Triton's words).
func (s *Service) CudaSharedMemoryStatus(name string) (*inferencepb.CudaSharedMemoryStatusResponse, error) {
	if name != "" {
		return nil, status.Errorf(codes.NotFound, "Unable to find cuda shared memory region: '%s' (%s)", status.Clip(name, false), noCUDA)
	}
	return &inferencepb.CudaSharedMemoryStatusResponse{}, nil
}

// CudaSharedMemoryRegister: refused, as a Triton without GPUs refuses it.
func (s *Service) CudaSharedMemoryRegister(name string) error {
	return status.Invalid("failed to register CUDA shared memory region: '%s', GPUs not supported (%s; use system "+
		"shared memory: --system-shared-memory)", status.Clip(name, false), noCUDA)
}
