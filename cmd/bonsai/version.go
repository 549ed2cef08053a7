package main

import (
	"fmt"
	"io"
	"runtime"

	"github.com/spf13/cobra"

	"bonsai.dev/bonsai/apiserver"
)

func newVersionCmd(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print bonsai's version, the Kubernetes version it serves and the Go version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintf(stdout, "bonsai:     %s\nkubernetes: %s\ngo:         %s %s/%s\n",
				version, apiserver.KubernetesVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}
