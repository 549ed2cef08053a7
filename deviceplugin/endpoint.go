package deviceplugin

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc/backoff"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// endpoint is the manager's connection to one registered plugin.
type endpoint struct {
	resource string
	socket   string
	conn     *grpc.ClientConn
	client   pluginapi.DevicePluginClient
	opts     *pluginapi.DevicePluginOptions
	ctx      context.Context
	cancel   context.CancelFunc
}

// DialUnix makes a gRPC client of a unix socket, as the device plugin
// and pod-resources APIs are served: no TLS, the file system's permissions
// guard it. It connects on first use.
func DialUnix(socket string) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// gRPC waits a second before its first reconnect: far too long
		// for a socket on this host that is usually there a moment later
		// (a plugin registers, then serves), and the registration's
		// capacity would wait for it.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{
			BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second,
		}, MinConnectTimeout: 5 * time.Second}),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		}))
}

// dial connects to a plugin's unix socket.
func dial(parent context.Context, resource, socket string) (*endpoint, error) {
	conn, err := DialUnix(socket)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(parent)
	return &endpoint{resource: resource, socket: socket, conn: conn, client: pluginapi.NewDevicePluginClient(conn), ctx: ctx, cancel: cancel}, nil
}

func (e *endpoint) stop() {
	e.cancel()
	e.conn.Close()
}

// listAndWatch feeds every device list the plugin sends to update until
// the stream ends.
func (e *endpoint) listAndWatch(update func([]*pluginapi.Device)) error {
	stream, err := e.client.ListAndWatch(e.ctx, &pluginapi.Empty{})
	if err != nil {
		return err
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		update(resp.Devices)
	}
}

func (e *endpoint) preferred(ctx context.Context, available, mustInclude []string, size int) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := e.client.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs: available, MustIncludeDeviceIDs: mustInclude, AllocationSize: int32(size),
		}},
	})
	if err != nil {
		return nil, err
	}
	if len(resp.ContainerResponses) != 1 {
		return nil, fmt.Errorf("GetPreferredAllocation answered %d containers, want 1", len(resp.ContainerResponses))
	}
	return resp.ContainerResponses[0].DeviceIDs, nil
}

func (e *endpoint) allocate(ctx context.Context, ids []string) (*pluginapi.ContainerAllocateResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := e.client.Allocate(ctx, &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}},
	})
	if err != nil {
		return nil, err
	}
	if len(resp.ContainerResponses) != 1 {
		return nil, fmt.Errorf("Allocate answered %d containers, want 1", len(resp.ContainerResponses))
	}
	return resp.ContainerResponses[0], nil
}

func (e *endpoint) preStart(ctx context.Context, ids []string) error {
	ctx, cancel := context.WithTimeout(ctx, pluginapi.KubeletPreStartContainerRPCTimeoutInSecs*time.Second)
	defer cancel()
	_, err := e.client.PreStartContainer(ctx, &pluginapi.PreStartContainerRequest{DevicesIds: ids})
	return err
}
