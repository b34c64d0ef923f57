package kubernetes

import (
	"bytes"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

type meta struct {
	Name      string            `yaml:"name"`
	Namespace string            `yaml:"namespace"`
	Labels    map[string]string `yaml:"labels"`
}

type volume struct {
	Name     string `yaml:"name"`
	HostPath *struct {
		Path string `yaml:"path"`
		Type string `yaml:"type"`
	} `yaml:"hostPath"`
	ConfigMap *struct {
		Name string `yaml:"name"`
	} `yaml:"configMap"`
}

type mount struct {
	Name      string `yaml:"name"`
	MountPath string `yaml:"mountPath"`
	ReadOnly  bool   `yaml:"readOnly"`
}

type probe struct {
	Exec *struct {
		Command []string `yaml:"command"`
	} `yaml:"exec"`
	PeriodSeconds    int `yaml:"periodSeconds"`
	TimeoutSeconds   int `yaml:"timeoutSeconds"`
	FailureThreshold int `yaml:"failureThreshold"`
}

type container struct {
	Name            string   `yaml:"name"`
	Image           string   `yaml:"image"`
	ImagePullPolicy string   `yaml:"imagePullPolicy"`
	Command         []string `yaml:"command"`
	StartupProbe    *probe   `yaml:"startupProbe"`
	ReadinessProbe  *probe   `yaml:"readinessProbe"`
	LivenessProbe   *probe   `yaml:"livenessProbe"`
	SecurityContext struct {
		Privileged *bool `yaml:"privileged"`
	} `yaml:"securityContext"`
	VolumeMounts []mount `yaml:"volumeMounts"`
}

type podSpec struct {
	NodeSelector                  map[string]string `yaml:"nodeSelector"`
	AutomountServiceAccountToken  *bool             `yaml:"automountServiceAccountToken"`
	HostPID                       bool              `yaml:"hostPID"`
	HostNetwork                   bool              `yaml:"hostNetwork"`
	TerminationGracePeriodSeconds *int              `yaml:"terminationGracePeriodSeconds"`
	Containers                    []container       `yaml:"containers"`
	Volumes                       []volume          `yaml:"volumes"`
}

type object struct {
	APIVersion string            `yaml:"apiVersion"`
	Kind       string            `yaml:"kind"`
	Metadata   meta              `yaml:"metadata"`
	Data       map[string]string `yaml:"data"`
	Spec       struct {
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template struct {
			Metadata meta    `yaml:"metadata"`
			Spec     podSpec `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
	Resources []string `yaml:"resources"`
	Images    []struct {
		Name   string `yaml:"name"`
		NewTag string `yaml:"newTag"`
	} `yaml:"images"`
}

// load parses every YAML document of file.
func load(t *testing.T, file string) []object {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	var out []object
	for {
		var o object
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		out = append(out, o)
	}
}

// flatten lists the dotted keys of a YAML mapping's leaves.
func flatten(prefix string, m map[string]any, out map[string]any) {
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			flatten(prefix+k+".", sub, out)
			continue
		}
		out[prefix+k] = v
	}
}

func configKeys(t *testing.T, text string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(text), &m); err != nil {
		t.Fatalf("fulcrum.yaml: %v", err)
	}
	out := map[string]any{}
	flatten("", m, out)
	return out
}

// The manifests parse, kustomization lists them all, and the DaemonSet, the ConfigMap
// and fulcrumd's configuration agree: Jetson-only scheduling, privileged, every host
// path the board layer needs mounted where board_root says, state and sockets on
// hostPaths, a grace period long enough to restore the board.
func TestManifests(t *testing.T) {
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	byKind := map[string][]object{}
	var kustomization object
	for _, f := range files {
		for _, o := range load(t, f) {
			if o.Kind == "Kustomization" {
				kustomization = o
				continue
			}
			if o.APIVersion == "" || o.Kind == "" || o.Metadata.Name == "" {
				t.Errorf("%s: an object without apiVersion, kind or name: %+v", f, o)
			}
			byKind[o.Kind] = append(byKind[o.Kind], o)
		}
	}
	var listed []string
	for _, f := range files {
		if f != "kustomization.yaml" {
			listed = append(listed, f)
		}
	}
	if got := slices.Sorted(slices.Values(kustomization.Resources)); !slices.Equal(got, listed) {
		t.Errorf("kustomization.yaml resources %v, want every manifest %v", got, listed)
	}
	one := func(kind string) object {
		t.Helper()
		if len(byKind[kind]) != 1 {
			t.Fatalf("want one %s, have %d", kind, len(byKind[kind]))
		}
		return byKind[kind][0]
	}
	ns, cm, ds := one("Namespace"), one("ConfigMap"), one("DaemonSet")
	if ns.Metadata.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("namespace %s must admit privileged pods", ns.Metadata.Name)
	}
	for _, o := range []object{cm, ds} {
		if o.Metadata.Namespace != ns.Metadata.Name {
			t.Errorf("%s %s is in namespace %q, want %q", o.Kind, o.Metadata.Name, o.Metadata.Namespace, ns.Metadata.Name)
		}
	}
	if len(byKind) != 3 {
		t.Errorf("unexpected kinds: %v (RBAC is not needed: fulcrumd never calls the API)", slices.Sorted(maps.Keys(byKind)))
	}

	// fulcrumd's configuration: only keys fulcrumd knows (configs/fulcrum.yaml lists
	// every one), and the values the mounts depend on.
	known := configKeys(t, string(mustRead(t, "../../configs/fulcrum.yaml")))
	cfg := configKeys(t, cm.Data["fulcrum.yaml"])
	for k := range cfg {
		if _, ok := known[k]; !ok {
			t.Errorf("ConfigMap fulcrum.yaml: unknown key %q (fulcrumd would refuse to start)", k)
		}
	}
	str := func(k string) string {
		v, _ := cfg[k].(string)
		return v
	}
	if str("board") != "auto" || str("board_root") == "" || str("runtime_dir") == "" || str("state_dir") == "" {
		t.Fatalf("ConfigMap fulcrum.yaml must set board: auto, board_root, runtime_dir and state_dir: %v", cfg)
	}

	// The FROM scratch image has no /etc/group: a group name would fail the lookup and
	// fulcrumd's start.
	if str("control.group") != "-" {
		t.Errorf(`ConfigMap fulcrum.yaml: control.group %q: the image has no /etc/group, want "-"`, str("control.group"))
	}

	pod := ds.Spec.Template.Spec
	for k, v := range ds.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Metadata.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the pod template's labels", k, v)
		}
	}
	if pod.NodeSelector["kubernetes.io/arch"] != "arm64" || pod.NodeSelector["nvidia.com/jetson"] != "true" {
		t.Errorf("nodeSelector %v: want kubernetes.io/arch=arm64 and nvidia.com/jetson=\"true\"", pod.NodeSelector)
	}
	if pod.HostPID || pod.HostNetwork {
		t.Error("hostPID and hostNetwork must stay false: fulcrumd needs neither")
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("automountServiceAccountToken must be false: fulcrumd never calls the API")
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g < 30 {
		t.Errorf("terminationGracePeriodSeconds %v: want at least 30 s to restore the board", g)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("want one container, have %d", len(pod.Containers))
	}
	c := pod.Containers[0]
	if p := c.SecurityContext.Privileged; p == nil || !*p {
		t.Error("the container must be privileged (sysfs and debugfs writes; see the comment)")
	}
	if c.Image == "" || len(c.Command) == 0 || !strings.HasSuffix(c.Command[0], "/fulcrumd") {
		t.Errorf("container image %q, command %v", c.Image, c.Command)
	}

	vols := map[string]volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	mounted := map[string]bool{}
	byHost := map[string]mount{}
	hostType := map[string]string{}
	for _, m := range c.VolumeMounts {
		v, ok := vols[m.Name]
		if !ok {
			t.Errorf("volumeMount %s has no volume", m.Name)
			continue
		}
		mounted[m.Name] = true
		switch {
		case v.HostPath != nil:
			byHost[v.HostPath.Path] = m
			hostType[v.HostPath.Path] = v.HostPath.Type
		case v.ConfigMap != nil:
			if v.ConfigMap.Name != cm.Metadata.Name || m.MountPath != "/etc/fulcrum" {
				t.Errorf("config volume: ConfigMap %s at %s, want %s at /etc/fulcrum", v.ConfigMap.Name, m.MountPath, cm.Metadata.Name)
			}
		}
	}
	for name := range vols {
		if !mounted[name] {
			t.Errorf("volume %s is never mounted", name)
		}
	}
	// The board layer reads each path under board_root, so each host path must be
	// mounted at board_root + the path fulcrumd asks for.
	root := strings.TrimSuffix(str("board_root"), "/")
	for _, w := range []struct {
		host, at string // at: the path fulcrumd reads, under board_root
		rw       bool
	}{
		{"/sys", "/sys", true},
		{"/sys/kernel/debug", "/sys/kernel/debug", true},
		{"/sys/firmware/devicetree/base", "/proc/device-tree", false},
		{"/etc/nvpmodel.conf", "/etc/nvpmodel.conf", false},
		{"/etc/nv_tegra_release", "/etc/nv_tegra_release", false},
		{"/var/lib/nvpmodel", "/var/lib/nvpmodel", false},
	} {
		m, ok := byHost[w.host]
		switch {
		case !ok:
			t.Errorf("host path %s is not mounted", w.host)
		case m.MountPath != root+w.at:
			t.Errorf("host %s is mounted at %s, want board_root+%s = %s", w.host, m.MountPath, w.at, root+w.at)
		case m.ReadOnly == w.rw:
			t.Errorf("host %s: readOnly=%v, want %v", w.host, m.ReadOnly, !w.rw)
		}
	}
	for host, dir := range map[string]string{"/var/lib/fulcrum": str("state_dir"), "/run/fulcrum": str("runtime_dir")} {
		m, ok := byHost[host]
		if !ok || m.MountPath != dir || m.ReadOnly || hostType[host] != "DirectoryOrCreate" {
			t.Errorf("host %s: mounted %v at %q (readOnly %v, type %q), want read-write DirectoryOrCreate at %s", host, ok, m.MountPath, m.ReadOnly, hostType[host], dir)
		}
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// Issue 27 item 5: the DaemonSet runs a pinned image (the kustomization's tag, never
// latest) and has startup, readiness and liveness probes: fulcrumctl health against
// the control socket in the runtime directory the ConfigMap sets (--live for liveness
// and startup: the control loop only).
func TestProbesAndPinnedImage(t *testing.T) {
	var ds, cm, kz object
	for _, f := range []string{"daemonset.yaml", "configmap.yaml", "kustomization.yaml"} {
		for _, o := range load(t, f) {
			switch o.Kind {
			case "DaemonSet":
				ds = o
			case "ConfigMap":
				cm = o
			case "Kustomization":
				kz = o
			}
		}
	}
	if len(ds.Spec.Template.Spec.Containers) != 1 {
		t.Fatal("want one container")
	}
	c := ds.Spec.Template.Spec.Containers[0]
	name, tag, ok := strings.Cut(c.Image, ":")
	if !ok || tag == "" || tag == "latest" {
		t.Errorf("image %q: want a pinned release tag, not latest", c.Image)
	}
	if c.ImagePullPolicy != "IfNotPresent" {
		t.Errorf("imagePullPolicy %q: want IfNotPresent for a pinned tag", c.ImagePullPolicy)
	}
	if len(kz.Images) != 1 || kz.Images[0].Name != name || kz.Images[0].NewTag != tag {
		t.Errorf("kustomization images %+v: want %s at the DaemonSet's tag %s", kz.Images, name, tag)
	}
	cfg := configKeys(t, cm.Data["fulcrum.yaml"])
	run, _ := cfg["runtime_dir"].(string)
	sock := strings.TrimSuffix(run, "/") + "/control.sock"
	mounted := slices.ContainsFunc(c.VolumeMounts, func(m mount) bool { return m.MountPath == run })
	if run == "" || !mounted {
		t.Fatalf("runtime_dir %q is not mounted in the container", run)
	}
	for _, p := range []struct {
		name string
		pr   *probe
		live bool
	}{{"startupProbe", c.StartupProbe, true}, {"readinessProbe", c.ReadinessProbe, false}, {"livenessProbe", c.LivenessProbe, true}} {
		if p.pr == nil || p.pr.Exec == nil {
			t.Errorf("%s: missing (want an exec of fulcrumctl health)", p.name)
			continue
		}
		cmd := p.pr.Exec.Command
		if len(cmd) < 2 || cmd[0] != "/usr/bin/fulcrumctl" || cmd[1] != "health" {
			t.Errorf("%s: %q, want /usr/bin/fulcrumctl health ...", p.name, cmd)
		}
		i := slices.Index(cmd, "--socket")
		if i < 0 || i+1 >= len(cmd) || cmd[i+1] != sock {
			t.Errorf("%s: %q, want --socket %s (runtime_dir's control socket)", p.name, cmd, sock)
		}
		if slices.Contains(cmd, "--live") != p.live {
			t.Errorf("%s: %q: --live %v, want %v", p.name, cmd, !p.live, p.live)
		}
		if p.pr.TimeoutSeconds < 5 || p.pr.PeriodSeconds <= 0 || p.pr.FailureThreshold < 2 {
			t.Errorf("%s: timeout %d s, period %d s, failures %d: want a timeout of 5 s or more and more than one failure", p.name, p.pr.TimeoutSeconds, p.pr.PeriodSeconds, p.pr.FailureThreshold)
		}
	}
}
