// Command bonsai is the single binary. `bonsai server` runs the control
// plane (store, API server, scheduler, controllers, node lifecycle) and, unless
// --disable-agent, this host's node (kubelet on containerd or simulated, pod
// network, service proxy, cluster DNS, device manager) in one process, plus
// any --simulated-nodes; `bonsai images` imports and lists the node's images,
// `bonsai token create` makes bootstrap tokens, `bonsai certificate`
// checks and rotates the certificates, and `bonsai version` says what it
// is. This package owns the process: flags and config file, logging,
// listeners, the data dir and its modes, the containerd it may start, memory
// handed back to the OS, signals and exit codes. It wires the components
// together and must not reach into their internals.
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
)

// version is bonsai's own version, set at build time with
// -ldflags "-X main.version=v0.1.0".
var version = "dev"

func main() {
	root := newRootCmd(os.Stdout, os.Stderr, runServer)
	if err := root.ExecuteContext(context.Background()); err != nil {
		fmt.Fprintf(os.Stderr, "bonsai: %s\n", oneLine(err.Error()))
		os.Exit(1)
	}
}

// newRootCmd builds the command tree; run is what `bonsai server` does with
// its checked configuration, so tests can stop right before it.
func newRootCmd(stdout, stderr io.Writer, run func(context.Context, *serverConfig, io.Writer) error) *cobra.Command {
	root := &cobra.Command{
		Use:   "bonsai",
		Short: "A whole Kubernetes in one small binary",
		// Errors are printed once, as one line, by main; usage only on
		// request.
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newServerCmd(stderr, run), newAgentCmd(stderr), newVersionCmd(stdout), newImagesCmd(stdout), newTokenCmd(stdout), newSecretsEncryptCmd(stdout), newSnapshotCmd(stdout), newCertificateCmd(stdout))
	refuseUnknownSubcommands(root)
	return root
}

// refuseUnknownSubcommands makes every command that only groups others
// (bonsai images, token, secrets-encrypt) fail on a word that is none of
// them, as the root does, rather than print its help and exit 0; alone,
// it still prints its help.
func refuseUnknownSubcommands(cmd *cobra.Command) {
	for _, c := range cmd.Commands() {
		refuseUnknownSubcommands(c)
	}
	if cmd.HasParent() && cmd.HasSubCommands() && !cmd.Runnable() {
		cmd.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return cmd.Help()
		}
	}
}

func newServerCmd(stderr io.Writer, run func(context.Context, *serverConfig, io.Writer) error) *cobra.Command {
	o := &serverOptions{}
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the Kubernetes API server and control plane",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyConfigFile(cmd.Flags(), o.configFile, cmd.Flags().Changed("config")); err != nil {
				return err
			}
			cfg, err := o.validate()
			if err != nil {
				return err
			}
			return run(cmd.Context(), cfg, stderr)
		},
	}
	o.addFlags(cmd.Flags())
	return cmd
}
