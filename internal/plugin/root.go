package plugin

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
	"github.com/tether-dev/tether/pkg/client"
)

// Env variables that default the read endpoint's flags.
const (
	EnvURL = "TETHER_URL"
	EnvCA  = "TETHER_CA"
)

// options are the flags every command shares.
type options struct {
	config        *genericclioptions.ConfigFlags
	streams       genericiooptions.IOStreams
	allNamespaces bool
	output        string
	tetherURL     string
	tetherCA      string
	tetherName    string
	// now is the clock of ages and durations (tests fix it).
	now func() time.Time
}

// NewCommand returns kubectl tether's root command.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{config: genericclioptions.NewConfigFlags(true), streams: streams, now: time.Now}
	root := &cobra.Command{
		Use:   "kubectl-tether",
		Short: "Follow and command Tether-bound TrainJobs",
		Long: "kubectl tether shows the WorkerBindings of Tether-bound TrainJobs (a binding has its TrainJob's name),\n" +
			"their artifacts and archived logs, and sends them flush, drain and cancel commands.\n" +
			"Artifact and log reads go through your kubeconfig's API server to Tether's read API\n" +
			"(artifacts.tether.dev, installed with the chart's readAPI.enabled), which RBAC lets you use\n" +
			"where you hold get on workerbindings/objects (ClusterRole tether-artifact-reader). Inside the\n" +
			"cluster, --tether-url (or " + EnvURL + ") reads from the binding Service instead, with your bearer token.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	o.config.AddFlags(root.PersistentFlags())
	root.PersistentFlags().StringVar(&o.tetherURL, "tether-url", os.Getenv(EnvURL), "base URL of the control plane's binding Service, for artifact and log reads from inside the cluster (env "+EnvURL+"; default: through the API server's read API)")
	root.PersistentFlags().StringVar(&o.tetherCA, "tether-ca", os.Getenv(EnvCA), "PEM file of the CA that signs the binding Service's certificate (env "+EnvCA+"; default: system roots)")
	root.PersistentFlags().StringVar(&o.tetherName, "tether-server-name", "", "name the read endpoint's certificate must carry when --tether-url reaches it by another (a port-forward's localhost, a pod IP), e.g. tether-control-plane.tether-system.svc")
	root.AddCommand(o.getCmd(), o.describeCmd(), o.logsCmd(), o.artifactsCmd(), o.waitCmd(),
		o.commandCmd(client.Flush, "Upload every artifact now (training goes on)"),
		o.commandCmd(client.Drain, "Flush, then have the worker wrap up"),
		o.cancelCmd())
	return root
}

// client builds a pkg/client Client from the kubeconfig flags.
func (o *options) client() (*client.Client, error) {
	cfg, err := o.config.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	opts := client.Options{ReadURL: o.tetherURL, ReadServerName: o.tetherName}
	if o.tetherCA != "" {
		if opts.ReadCA, err = os.ReadFile(o.tetherCA); err != nil {
			return nil, fmt.Errorf("--tether-ca: %w", err)
		}
	}
	return client.New(cfg, opts)
}

// namespace is -n, else the kubeconfig context's namespace.
// binding is the client, the namespace and the WorkerBinding name a
// command is about.
func (o *options) binding(ctx context.Context, name string) (*client.Client, string, *tetherv1.WorkerBinding, error) {
	c, err := o.client()
	if err != nil {
		return nil, "", nil, err
	}
	ns, err := o.namespace()
	if err != nil {
		return nil, "", nil, err
	}
	wb, err := c.Get(ctx, ns, name)
	return c, ns, wb, err
}

func (o *options) namespace() (string, error) {
	ns, _, err := o.config.ToRawKubeConfigLoader().Namespace()
	return ns, err
}

// completeBindings completes a WorkerBinding name in the namespace.
func (o *options) completeBindings(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	c, err := o.client()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	ns, err := o.namespace()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	list, err := c.List(cmd.Context(), ns)
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	names := make([]string, 0, len(list))
	for _, wb := range list {
		names = append(names, wb.Name)
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}
