// Command dradriver is a DRA driver for bonsai's e2e tests, built on
// k8s.io/dynamic-resource-allocation/kubeletplugin as vendors' drivers
// are: it registers in the kubelet's plugin registry, publishes a
// ResourceSlice of -devices devices for its node and, for each allocated
// device of a claim, writes a CDI spec whose device sets DRA_DEVICE and
// DRA_CLAIM and gives the container -host-dev as /dev/dra<index>. It
// prints "prepare <ns>/<claim>" and "unprepare <ns>/<claim>" for each
// call it gets, and fails prepares while -fail-file exists.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"
)

type driver struct {
	name, node, cdiDir, hostDev, failFile string
	mu                                    sync.Mutex
}

func main() {
	d := &driver{}
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server")
	registry := flag.String("registry-dir", "/var/lib/kubelet/plugins_registry", "the kubelet's plugin registry")
	pluginDir := flag.String("plugin-dir", "", "where the DRA socket goes (default <registry-dir>/../plugins/<driver>)")
	devices := flag.Int("devices", 1, "devices to publish")
	flag.StringVar(&d.name, "driver", "dra.bonsai.test", "driver name")
	flag.StringVar(&d.node, "node", "", "node name")
	flag.StringVar(&d.cdiDir, "cdi-dir", "/var/run/cdi", "where CDI specs are written")
	flag.StringVar(&d.hostDev, "host-dev", "/dev/zero", "host device node each device gives the container")
	flag.StringVar(&d.failFile, "fail-file", "", "prepare fails while this file exists")
	flag.Parse()
	if *pluginDir == "" {
		*pluginDir = filepath.Join(filepath.Dir(*registry), "plugins", d.name)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fatal(err)
	}
	if err := os.MkdirAll(*pluginDir, 0o750); err != nil {
		fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	h, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(d.name), kubeletplugin.NodeName(d.node), kubeletplugin.KubeClient(cs),
		kubeletplugin.RegistrarDirectoryPath(*registry), kubeletplugin.PluginDataDirectoryPath(*pluginDir),
		kubeletplugin.HealthService(false))
	if err != nil {
		fatal(err)
	}
	var devs []resourceapi.Device
	for i := range *devices {
		devs = append(devs, resourceapi.Device{Name: fmt.Sprintf("dev%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"index": {IntValue: ptr.To(int64(i))}}})
	}
	if err := h.PublishResources(ctx, resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		d.node: {Slices: []resourceslice.Slice{{Devices: devs}}},
	}}); err != nil {
		fatal(err)
	}
	fmt.Println("started")
	<-ctx.Done()
	h.Stop()
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "dradriver:", err)
	os.Exit(1)
}

func (d *driver) specPath(uid types.UID) string {
	return filepath.Join(d.cdiDir, d.name+"-"+string(uid)+".json")
}

func (d *driver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, c := range claims {
		fmt.Printf("prepare %s/%s\n", c.Namespace, c.Name)
		if _, err := os.Stat(d.failFile); d.failFile != "" && err == nil {
			out[c.UID] = kubeletplugin.PrepareResult{Err: errors.New("the test asks prepare to fail")}
			continue
		}
		type node struct {
			Path     string `json:"path"`
			HostPath string `json:"hostPath"`
		}
		type dev struct {
			Name           string `json:"name"`
			ContainerEdits struct {
				Env         []string `json:"env"`
				DeviceNodes []node   `json:"deviceNodes"`
			} `json:"containerEdits"`
		}
		var res kubeletplugin.PrepareResult
		var specDevs []dev
		for i, r := range c.Status.Allocation.Devices.Results {
			if r.Driver != d.name {
				continue
			}
			cd := dev{Name: string(c.UID) + "-" + r.Device}
			cd.ContainerEdits.Env = []string{"DRA_DEVICE=" + r.Device, "DRA_CLAIM=" + c.Name}
			cd.ContainerEdits.DeviceNodes = []node{{Path: fmt.Sprintf("/dev/dra%d", i), HostPath: d.hostDev}}
			specDevs = append(specDevs, cd)
			res.Devices = append(res.Devices, kubeletplugin.Device{Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device,
				CDIDeviceIDs: []string{d.name + "/device=" + cd.Name}})
		}
		b, _ := json.Marshal(map[string]any{"cdiVersion": "0.6.0", "kind": d.name + "/device", "devices": specDevs})
		if err := os.WriteFile(d.specPath(c.UID), b, 0o644); err != nil {
			res = kubeletplugin.PrepareResult{Err: err}
		}
		out[c.UID] = res
	}
	return out, nil
}

func (d *driver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[types.UID]error{}
	for _, c := range claims {
		fmt.Printf("unprepare %s/%s\n", c.Namespace, c.Name)
		if err := os.Remove(d.specPath(c.UID)); err != nil && !errors.Is(err, os.ErrNotExist) {
			out[c.UID] = err
			continue
		}
		out[c.UID] = nil
	}
	return out, nil
}

func (d *driver) HandleError(_ context.Context, err error, msg string) {
	fmt.Fprintf(os.Stderr, "dradriver: %s: %v\n", msg, err)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) {
		os.Exit(1)
	}
}

func (d *driver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}
