package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"

	"github.com/fulcrum-edge/fulcrum/fulcrum/daemon"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/search"
	"github.com/fulcrum-edge/fulcrum/internal/optcheck"
	"github.com/fulcrum-edge/fulcrum/internal/units"
)

// DefaultConfigPath is read when --config is not given and the file exists.
const DefaultConfigPath = "/etc/fulcrum/fulcrum.yaml"

// configVersion is the newest configuration file version this fulcrumd reads. A file
// without a version key is version 1 (every file written before the key existed).
const configVersion = 1

// readsVersions says which file versions this fulcrumd reads.
func readsVersions() string {
	if configVersion == 1 {
		return "version 1"
	}
	return fmt.Sprintf("versions 1 to %d", configVersion)
}

// migration rewrites a file of version from, as read, into version from+1's keys.
type migration struct {
	from  int
	apply func(raw map[string]any) error
}

// migrations turn older files into configVersion's, in order. A change that moves or
// renames keys raises configVersion and adds one here; version 1 needs none.
func migrations() []migration { return nil }

// migrate applies the migrations from version on to raw, oldest first.
func migrate(raw map[string]any, version int, ms []migration) error {
	for _, m := range ms {
		if m.from >= version {
			if err := m.apply(raw); err != nil {
				return fmt.Errorf("migrate from version %d: %w (write the file for version %d, configs/fulcrum.yaml)", m.from, err, configVersion)
			}
		}
	}
	return nil
}

// config is what the configuration decodes into: daemon.Options, whose keys are the
// mapstructure tags on the option structs that own them (daemon.Options, daemon.Config,
// sched.Config, control.Config, server.Config, nvml.Options), and fulcrumd's own keys.
// Durations are time.Duration fields whose key ends in _ms or _s: the number is in that
// unit (fieldMap converts). Decoding starts from defaultConfig, so a default is written
// once, in the package that owns the field.
type config struct {
	daemon.Options `mapstructure:",squash"`
	Log            logConfig    `mapstructure:"log"`
	Budgets        budgetConfig `mapstructure:"budgets"`
}

type logConfig struct {
	Format string `mapstructure:"format"` // text or json
	Level  string `mapstructure:"level"`  // slog level name
}

// budgetConfig is the budgets section as operators write it: strings with their units,
// read by internal/units as fulcrumctl budget set and the --latency/--power flags read
// them. The latency budget is also the scheduler's.
type budgetConfig struct {
	Latency  string  `mapstructure:"latency"` // 100ms, 0.1s
	Power    string  `mapstructure:"power"`   // 30W, 30000mW, none
	Rate     string  `mapstructure:"rate"`    // "auto" or requests/s
	Quantile float64 `mapstructure:"quantile"`
}

// moved names the keys whose place in the file is not their struct's: the file keeps the
// sections operators know (runtime_dir at the top, the hold limits under worker), the
// structs keep their owners (daemon.Config, sched.Config). Each entry is {file, struct}
// key, the more specific first; a whole section moves with its keys.
func moved() [][2]string {
	return [][2]string{
		{"worker.hold_factor", "worker.scheduler.hold_factor"},
		{"worker.hold_min_ms", "worker.scheduler.hold_min_ms"},
		{"worker.hold_max_ms", "worker.scheduler.hold_max_ms"},
		{"scheduler", "worker.scheduler"},
		{"runtime_dir", "worker.runtime_dir"},
		{"metrics.listen", "metrics_listen"},
	}
}

// deprecatedKey is a key renamed when values with units replaced bare numbers; files and
// environments that still use it work, with a warning naming the new spelling.
type deprecatedKey struct {
	old, key string
	unit     string // what a bare number under old is: "W", "ms"
	write    func(x float64) string
}

func deprecatedKeys() []deprecatedKey {
	return []deprecatedKey{
		{"budgets.power_w", "budgets.power", "W", func(w float64) string { return units.PowerString(w * 1000) }},
		{"budgets.latency_ms", "budgets.latency", "ms", units.LatencyString},
	}
}

// Settings is the validated configuration.
type Settings struct {
	Daemon    daemon.Options // its Budgets are the operator's targets from budgets.*
	LogFormat string
	LogLevel  slog.Level
	// Warnings are deprecated spellings met (logged once the logger exists).
	Warnings []string
}

// defaultConfig is the configuration when nothing is set: the packages' defaults
// (daemon.DefaultOptions), plus fulcrumd's own (log, budgets.rate "auto": measure the rate).
func defaultConfig() config {
	o := daemon.DefaultOptions()
	return config{
		Options: o,
		Log:     logConfig{Format: "text", Level: "info"},
		Budgets: budgetConfig{
			Latency:  units.LatencyString(o.Targets.LatencyMS),
			Power:    units.PowerString(o.Targets.PowerMW),
			Rate:     "auto",
			Quantile: o.Targets.Quantile,
		},
	}
}

// defaultValues maps every key to its default as configs/fulcrum.yaml writes it (durations
// as numbers in the key's unit, socket modes as octal strings): viper's defaults, the
// flags' defaults.
func defaultValues() map[string]any {
	out := valuesOf(defaultConfig())
	out["version"] = configVersion
	return out
}

// valuesOf is c's value for every key, as the file writes it.
func valuesOf(c config) map[string]any {
	cv := reflect.ValueOf(c)
	out := map[string]any{}
	for _, k := range keys() {
		x := cv.FieldByIndex(k.index).Interface()
		switch y := x.(type) {
		case time.Duration:
			x = float64(y) / float64(k.unit)
		case os.FileMode:
			x = fmt.Sprintf("%04o", uint32(y))
		case []int:
			x = append([]int{}, y...) // a copy; empty, not nil, as the file's []
		}
		out[k.name] = x
	}
	return out
}

func newViper() *viper.Viper {
	v := viper.New()
	for k, d := range defaultValues() {
		if k != "version" { // the file's own: never from FULCRUM_VERSION
			v.SetDefault(k, d) // also what makes AutomaticEnv look the key up
		}
	}
	v.SetEnvPrefix("FULCRUM")
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	return v
}

// readConfigFile loads path, or the default path when it exists and path is empty: it
// checks the file's version, migrates an older one, and refuses unknown keys.
func readConfigFile(v *viper.Viper, path string) error {
	explicit := path != ""
	if !explicit {
		if _, err := os.Stat(DefaultConfigPath); err != nil {
			return nil
		}
		path = DefaultConfigPath
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read config: %w (pass --config FILE, or see configs/fulcrum.yaml for every key)", err)
	}
	var raw map[string]any
	if err := yaml.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("read config %s: %w (fix the YAML, or see configs/fulcrum.yaml for every key)", path, err)
	}
	version := 1
	if x, ok := raw["version"]; ok {
		n, isInt := x.(int)
		if !isInt || n < 1 {
			return fmt.Errorf("config %s: version must be a whole number, got %v (this fulcrumd reads %s)", path, x, readsVersions())
		}
		version = n
		delete(raw, "version")
	}
	if version > configVersion {
		return fmt.Errorf("config %s: version %d is newer than this fulcrumd reads (%s): upgrade fulcrumd, or write the file for version %d (configs/fulcrum.yaml)", path, version, readsVersions(), configVersion)
	}
	if err := migrate(raw, version, migrations()); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	if raw != nil {
		if err := v.MergeConfigMap(raw); err != nil {
			return fmt.Errorf("read config %s: %w", path, err)
		}
	}
	known := map[string]bool{}
	for _, k := range keys() {
		known[k.name] = true
	}
	for _, d := range deprecatedKeys() {
		known[d.old] = true
	}
	for _, k := range v.AllKeys() {
		if !known[k] && v.InConfig(k) {
			return fmt.Errorf("config %s: unknown key %q (see configs/fulcrum.yaml for every key)", path, k)
		}
	}
	return nil
}

// configErrors is every problem found in a configuration, one line each naming its key.
type configErrors []error

func (e configErrors) Error() string {
	lines := make([]string, len(e))
	for i, x := range e {
		lines[i] = x.Error()
	}
	return "invalid configuration: " + strings.Join(lines, "\n")
}

// settings decodes v into the typed configuration and validates it: every range error
// names its key.
func settings(v *viper.Viper) (Settings, error) {
	var s Settings
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	// Every problem is reported at once: a key that does not decode keeps its default
	// and the checks below go on.
	s.Warnings, errs = resolveDeprecated(v)
	c := defaultConfig()
	errs = append(errs, decode(v, &c)...)

	// The budgets in plan's units (milliseconds, milliwatts); the ranges are plan's.
	// A budget that does not parse keeps its default, so that the other budgets are
	// still checked.
	b := c.Budgets
	budgets := daemon.DefaultOptions().Targets
	budgets.Quantile = b.Quantile
	latencyMS, lerr := units.LatencyMSOf("budgets.latency", b.Latency)
	if lerr != nil {
		errs = append(errs, lerr)
	} else {
		budgets.LatencyMS = latencyMS
	}
	powerMW, perr := units.PowerMWOf("budgets.power", b.Power)
	if perr != nil {
		errs = append(errs, perr)
	} else {
		budgets.PowerMW = powerMW
	}
	if r := strings.TrimSpace(b.Rate); r != "auto" {
		rate, err := strconv.ParseFloat(r, 64)
		if err != nil || rate <= 0 {
			bad(`budgets.rate must be "auto" or a positive requests/s, got %q`, r)
		}
		budgets.RateRPS = rate
	}
	if b.Quantile == 0 {
		// plan reads a zero quantile as "the default"; in the file it is a mistake.
		bad("budgets.quantile must be in (0,1), e.g. 0.99, got 0")
	}

	s.LogFormat = c.Log.Format
	if s.LogFormat != "text" && s.LogFormat != "json" {
		bad(`log.format must be "text" or "json", got %q`, s.LogFormat)
	}
	if err := s.LogLevel.UnmarshalText([]byte(c.Log.Level)); err != nil {
		bad(`log.level must be debug, info, warn or error, got %q`, c.Log.Level)
	}
	if err := search.CheckLive(c.Control.Searcher); err != nil {
		bad("controller.%v", err)
	}

	s.Daemon = c.Options
	// An address with stray spaces (FULCRUM_METRICS_LISTEN=" :9464") would not bind.
	s.Daemon.MetricsListen = strings.TrimSpace(s.Daemon.MetricsListen)
	if s.Daemon.Server.Group == "" {
		// One group for both sockets unless worker.group says otherwise (issue 26
		// item 11: control.group used to leave worker.sock with root's group).
		s.Daemon.Server.Group = s.Daemon.API.Group
	}
	verr := s.Daemon.Validate()
	errs = append(errs, optcheck.Others(verr)...)
	for _, e := range optcheck.Fields(verr) {
		k := keyOf(e.Field)
		value := e.Value
		if d, ok := value.(time.Duration); ok && k.unit != 0 {
			value = float64(d) / float64(k.unit) // as the file writes it: 5, not 5ms
		}
		bad("%s %s, got %v", k.name, e.Problem, value)
	}
	s.Daemon.Targets = budgets
	if err := budgets.Validate(); err != nil {
		for _, e := range unjoin(err) {
			var re *plan.RangeError
			if errors.As(e, &re) && budgetKeyOf(re.Field) != "" {
				bad("budgets.%s: %v", budgetKeyOf(re.Field), e)
				continue
			}
			bad("budgets: %v", e)
		}
	}
	if len(errs) > 0 {
		return Settings{}, configErrors(errs)
	}
	return s, nil
}

// resolveDeprecated reads each deprecated key still in use as its new spelling (a
// warning says which), unless the new key is set where it takes precedence (flags >
// environment > file). Both spellings in the same place is an error: which one was meant?
func resolveDeprecated(v *viper.Viper) (warnings []string, errs []error) {
	for _, d := range deprecatedKeys() {
		x := v.Get(d.old)
		if x == nil || x == "" { // "": a flag set the new key (budgetFlags)
			continue
		}
		oldFrom, newFrom := source(v, d.old), source(v, d.key)
		switch {
		case newFrom > oldFrom:
			warnings = append(warnings, fmt.Sprintf("%s (deprecated) is ignored: %s is set in the %s; remove %s", d.old, d.key, sourceNames[newFrom], d.old))
			continue
		case newFrom == oldFrom:
			errs = append(errs, fmt.Errorf("%s and the deprecated %s are both set in the %s: keep %s (a value with its unit)", d.key, d.old, sourceNames[newFrom], d.key))
			continue
		}
		n, err := strconv.ParseFloat(strings.TrimSpace(fmt.Sprint(x)), 64)
		if err != nil || math.IsNaN(n) || math.IsInf(n, 0) {
			errs = append(errs, fmt.Errorf("%s (deprecated) must be a number of %s, got %q; write %s with its unit instead, e.g. %s", d.old, d.unit, fmt.Sprint(x), d.key, d.write(30)))
			continue
		}
		if n < 0 {
			errs = append(errs, fmt.Errorf("%s (deprecated) must not be negative, got %v; write %s with its unit instead, e.g. %s", d.old, n, d.key, d.write(30)))
			continue
		}
		s := d.write(n)
		v.Set(d.key, s)
		warnings = append(warnings, fmt.Sprintf("%s: %v is deprecated: write %s: %s (in the environment %s=%s)", d.old, x, d.key, s, envName(d.key), s))
	}
	return warnings, errs
}

// Where a key is set, in increasing precedence (flags are applied by budgetFlags).
const (
	fromDefault = iota
	fromFile
	fromEnv
)

var sourceNames = [...]string{fromDefault: "defaults", fromFile: "configuration file", fromEnv: "environment"}

func source(v *viper.Viper, key string) int {
	if os.Getenv(envName(key)) != "" { // viper ignores empty variables too
		return fromEnv
	}
	if v.InConfig(key) {
		return fromFile
	}
	return fromDefault
}

// envName is the FULCRUM_* variable that sets key.
func envName(key string) string {
	return "FULCRUM_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// budgetKeyOf names plan's budget fields by the configuration's keys ("" for none).
func budgetKeyOf(field string) string {
	switch field {
	case plan.FieldLatency:
		return "latency"
	case plan.FieldPower:
		return "power"
	case plan.FieldRate:
		return "rate"
	case plan.FieldQuantile:
		return "quantile"
	}
	return ""
}

// unjoin is the errors an errors.Join holds (the error itself otherwise).
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// decodeHooks read what the file, environment and flags write into the fields' types.
func decodeHooks() mapstructure.DecodeHookFunc {
	return mapstructure.ComposeDecodeHookFunc(trimNumbers, intListHook, fileModeHook)
}

// decode reads every key v holds into c (the keys v does not hold keep c's values),
// each error naming the file's key.
func decode(v *viper.Viper, c *config) []error {
	m, errs := fieldMap(v)
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		Result: c, ErrorUnused: true, WeaklyTypedInput: true, DecodeHook: decodeHooks(),
	})
	if err != nil {
		return []error{err}
	}
	if err := dec.Decode(m); err != nil {
		errs = append(errs, unjoin(decodeErrors(err))...)
	}
	return errs
}

// fieldMap is v's settings in the structs' shape (moved keys at their struct's place),
// durations converted from the key's unit.
func fieldMap(v *viper.Viper) (map[string]any, []error) {
	out := map[string]any{}
	var errs []error
	for _, k := range keys() {
		x := v.Get(k.name)
		if x == nil {
			continue
		}
		if k.unit != 0 {
			d, err := duration(x, k.unit)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", k.name, err))
				continue
			}
			x = d
		}
		m := out
		parts := strings.Split(k.field, ".")
		for _, p := range parts[:len(parts)-1] {
			sub, ok := m[p].(map[string]any)
			if !ok {
				sub = map[string]any{}
				m[p] = sub
			}
			m = sub
		}
		m[parts[len(parts)-1]] = x
	}
	return out, errs
}

// duration reads a number of unit (the key's _ms or _s) as a time.Duration.
func duration(x any, unit time.Duration) (time.Duration, error) {
	name := map[time.Duration]string{time.Millisecond: "milliseconds", time.Second: "seconds"}[unit]
	var n float64
	switch y := x.(type) {
	case int:
		n = float64(y)
	case int64:
		n = float64(y)
	case uint64:
		n = float64(y)
	case float64:
		n = y
	default:
		f, err := strconv.ParseFloat(strings.TrimSpace(fmt.Sprint(x)), 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not a number of %s", fmt.Sprint(x), name)
		}
		n = f
	}
	ns := n * float64(unit)
	if math.IsNaN(ns) || math.Abs(ns) > math.MaxInt64/2 {
		return 0, fmt.Errorf("%v %s is not a usable duration", n, name)
	}
	return time.Duration(ns), nil
}

// key is one configuration key: a tagged leaf of config.
type key struct {
	name   string        // the file's key: "scheduler.margin_ms"
	field  string        // its tags' path in config: "worker.scheduler.margin_ms"
	goPath string        // its Go field path in daemon.Options, as optcheck names it: "Server.Sched.Margin"
	unit   time.Duration // for time.Duration fields (keys ending in _ms or _s): what 1 is
	index  []int         // field index path in config
}

// keys lists config's tagged leaves in declaration order: a struct field with a tag is
// a section, a field without one (or with "-") is not configuration.
func keys() []key {
	var out []key
	var walk func(t reflect.Type, prefix, goPrefix string, index []int)
	walk = func(t reflect.Type, prefix, goPrefix string, index []int) {
		for i := range t.NumField() {
			sf := t.Field(i)
			tag, opts, _ := strings.Cut(sf.Tag.Get("mapstructure"), ",")
			idx := append(slices.Clone(index), i)
			switch {
			case opts == "squash":
				walk(sf.Type, prefix, goPrefix, idx)
				continue
			case tag == "" || tag == "-":
				continue
			case sf.Type.Kind() == reflect.Struct:
				walk(sf.Type, prefix+tag+".", goPrefix+sf.Name+".", idx)
				continue
			}
			k := key{field: prefix + tag, goPath: goPrefix + sf.Name, index: idx, name: fileKey(prefix + tag)}
			if sf.Type == reflect.TypeFor[time.Duration]() {
				switch {
				case strings.HasSuffix(tag, "_ms"):
					k.unit = time.Millisecond
				case strings.HasSuffix(tag, "_s"):
					k.unit = time.Second
				}
			}
			out = append(out, k)
		}
	}
	walk(reflect.TypeFor[config](), "", "", nil)
	return out
}

// fileKey is where the struct key field lives in the file (moved).
func fileKey(field string) string {
	for _, m := range moved() {
		if rest, ok := strings.CutPrefix(field, m[1]); ok && (rest == "" || rest[0] == '.') {
			return m[0] + rest
		}
	}
	return field
}

// keyOf is the key that sets the daemon.Options field path (named by the path itself
// when no key does).
func keyOf(goPath string) key {
	for _, k := range keys() {
		if k.goPath == goPath {
			return k
		}
	}
	return key{name: goPath}
}

// decodeErrors rewrites mapstructure's decoding errors ("decoding failed due to the
// following error(s): 'worker.hold_factor' cannot parse value as 'float64': …") as one
// line per key saying what the key wants.
func decodeErrors(err error) error {
	var out []error
	var walk func(error)
	walk = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		de, ok := err.(*mapstructure.DecodeError)
		if !ok {
			if errors.As(err, &de) { // mapstructure's "decoding failed" wrapper
				walk(errors.Unwrap(err))
				return
			}
			out = append(out, err)
			return
		}
		var pe *mapstructure.ParseError
		var ue *mapstructure.UnconvertibleTypeError
		name := fileKey(de.Name()) // mapstructure names the struct's place
		switch inner := de.Unwrap(); {
		case errors.As(inner, &pe):
			out = append(out, fmt.Errorf("%s: %q is not %s", name, fmt.Sprint(pe.Value), kindName(pe.Expected.Kind())))
		case errors.As(inner, &ue):
			out = append(out, fmt.Errorf("%s: want %s, got %v", name, kindName(ue.Expected.Kind()), ue.Value))
		default:
			out = append(out, fmt.Errorf("%s: %w", name, inner))
		}
	}
	walk(err)
	return errors.Join(out...)
}

func kindName(k reflect.Kind) string {
	switch k {
	case reflect.Float64, reflect.Int, reflect.Uint32:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "a list"
	case reflect.Struct:
		return "a section of keys"
	}
	return "a " + k.String()
}

// trimNumbers lets numbers from environment variables and flags carry spaces
// (FULCRUM_SCHEDULER_MARGIN_MS=" 5"), as the getters this decoder replaced did.
func trimNumbers(from, to reflect.Type, data any) (any, error) {
	if s, ok := data.(string); ok && from.Kind() == reflect.String {
		switch to.Kind() {
		case reflect.Float64, reflect.Int, reflect.Bool:
			return strings.TrimSpace(s), nil
		}
	}
	return data, nil
}

// intListHook reads a list of integers given as a YAML list or as a comma/space
// separated string (environment variables: FULCRUM_CONTROLLER_INFER_BATCHES="1,2,4").
func intListHook(from, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeFor[[]int]() {
		return data, nil
	}
	var out []int
	switch x := data.(type) {
	case []int:
		return x, nil
	case []any:
		for _, e := range x {
			n, err := strconv.Atoi(strings.TrimSpace(fmt.Sprint(e)))
			if err != nil {
				return nil, fmt.Errorf("%v is not an integer", e)
			}
			out = append(out, n)
		}
	default:
		for _, f := range strings.FieldsFunc(fmt.Sprint(x), func(r rune) bool { return r == ',' || r == ' ' || r == '[' || r == ']' }) {
			n, err := strconv.Atoi(f)
			if err != nil {
				return nil, fmt.Errorf("%q is not an integer (want a list like [1, 2, 4])", f)
			}
			out = append(out, n)
		}
	}
	if out == nil {
		out = []int{}
	}
	return out, nil
}

// fileModeHook reads permission bits written in octal ("0660").
func fileModeHook(from, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeFor[os.FileMode]() {
		return data, nil
	}
	s := fmt.Sprint(data)
	mode, err := strconv.ParseUint(s, 8, 32)
	if err != nil || mode > 0o777 {
		return nil, fmt.Errorf(`must be octal permission bits like "0660", got %q`, s)
	}
	return os.FileMode(mode), nil
}

func newLogger(w io.Writer, format string, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
