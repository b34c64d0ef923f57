package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"

	"github.com/fulcrum-edge/fulcrum/fulcrum/daemon"
	"github.com/fulcrum-edge/fulcrum/fulcrum/plan"
	"github.com/fulcrum-edge/fulcrum/fulcrum/search"
	"github.com/fulcrum-edge/fulcrum/internal/optcheck"
)

// DefaultConfigPath is read when --config is not given and the file exists.
const DefaultConfigPath = "/etc/fulcrum/fulcrum.yaml"

// fileConfig is the configuration file's shape: one field per key of configs/fulcrum.yaml
// (the mapstructure tag), decoded by viper's UnmarshalExact from the file, FULCRUM_*
// variables and flags. Quantities keep the key's unit (_ms, _s, _w).
//
// An `opt` tag names the daemon.Options field the key sets (a dotted Go path): toOptions
// copies the value there, converting *_ms and *_s numbers to time.Duration;
// defaultFileConfig reads the defaults back from daemon.DefaultOptions (the packages'
// DefaultConfig); and a range error from daemon.Options.Validate naming that field is
// reported under the key. Keys without an opt tag (budgets.rate/power_w/quantile, log,
// controller.searcher) are converted and checked in settings.
type fileConfig struct {
	RuntimeDir  string     `mapstructure:"runtime_dir" opt:"Server.RuntimeDir"`
	StateDir    string     `mapstructure:"state_dir" opt:"StateDir"`
	DB          string     `mapstructure:"db" opt:"DBPath"`
	DBTimeoutMS float64    `mapstructure:"db_timeout_ms" opt:"StoreTimeout"`
	Board       string     `mapstructure:"board" opt:"Board"`
	BoardRoot   string     `mapstructure:"board_root" opt:"BoardRoot"`
	NVML        nvmlKeys   `mapstructure:"nvml"`
	Log         logKeys    `mapstructure:"log"`
	Budgets     budgetKeys `mapstructure:"budgets"`
	Scheduler   schedKeys  `mapstructure:"scheduler"`
	Controller  ctrlKeys   `mapstructure:"controller"`
	Control     apiKeys    `mapstructure:"control"`
	Metrics     metricKeys `mapstructure:"metrics"`
	Worker      workerKeys `mapstructure:"worker"`
}

type nvmlKeys struct {
	Device       int    `mapstructure:"device" opt:"NVML.Device"`
	ClockControl bool   `mapstructure:"clock_control" opt:"NVML.ClockControl"`
	Library      string `mapstructure:"library" opt:"NVML.LibraryPath"`
}

type logKeys struct {
	Format string `mapstructure:"format"` // text or json
	Level  string `mapstructure:"level"`  // slog level name
}

// budgetKeys is the budgets section. The latency budget is also the scheduler's.
type budgetKeys struct {
	LatencyMS float64 `mapstructure:"latency_ms" opt:"Server.Sched.LatencyBudget"`
	PowerW    float64 `mapstructure:"power_w"`
	Rate      string  `mapstructure:"rate"` // "auto" or requests/s
	Quantile  float64 `mapstructure:"quantile"`
}

type schedKeys struct {
	DefaultTrainMS    float64 `mapstructure:"default_train_ms" opt:"Server.Sched.DefaultTrain"`
	DefaultInferMS    float64 `mapstructure:"default_infer_ms" opt:"Server.Sched.DefaultInfer"`
	EWMAAlpha         float64 `mapstructure:"ewma_alpha" opt:"Server.Sched.EWMAAlpha"`
	OverrunFactor     float64 `mapstructure:"overrun_factor" opt:"Server.Sched.OverrunFactor"`
	OverrunMinMS      float64 `mapstructure:"overrun_min_ms" opt:"Server.Sched.OverrunMin"`
	IdleAdmitArrivals float64 `mapstructure:"idle_admit_arrivals" opt:"Server.Sched.IdleAdmitArrivals"`
	DevK              float64 `mapstructure:"dev_k" opt:"Server.Sched.DevK"`
	MarginMS          float64 `mapstructure:"margin_ms" opt:"Server.Sched.Margin"`
	RoomGuard         float64 `mapstructure:"room_guard" opt:"Server.Sched.RoomGuard"`
	RoomMinMS         float64 `mapstructure:"room_min_ms" opt:"Server.Sched.RoomMin"`
	RoomMaxFrac       float64 `mapstructure:"room_max_frac" opt:"Server.Sched.RoomMaxFrac"`
	RoomIntervalMS    float64 `mapstructure:"room_interval_ms" opt:"Server.Sched.RoomInterval"`
	StarveMS          float64 `mapstructure:"starve_ms" opt:"Server.Sched.Starve"`
	ProfileWaitMS     float64 `mapstructure:"profile_wait_ms" opt:"Server.Sched.ProfileWait"`
	WindowS           float64 `mapstructure:"window_s" opt:"Server.Sched.Window"`
	WindowSamples     int     `mapstructure:"window_samples" opt:"Server.Sched.WindowSamples"`
	RecentWindowS     float64 `mapstructure:"recent_window_s" opt:"Server.Sched.RecentWindow"`
}

type ctrlKeys struct {
	PeriodMS          float64  `mapstructure:"period_ms" opt:"Control.Period"`
	PowerSampleMS     float64  `mapstructure:"power_sample_ms" opt:"Control.PowerSample"`
	PowerWindowMS     float64  `mapstructure:"power_window_ms" opt:"Control.PowerWindow"`
	PowerSettleMS     float64  `mapstructure:"power_settle_ms" opt:"Control.PowerSettle"`
	RateTauMS         float64  `mapstructure:"rate_tau_ms" opt:"Control.RateTau"`
	RateWarmupMS      float64  `mapstructure:"rate_warmup_ms" opt:"Control.RateWarmup"`
	DriftRel          float64  `mapstructure:"drift_rel" opt:"Control.DriftRel"`
	DriftHoldMS       float64  `mapstructure:"drift_hold_ms" opt:"Control.DriftHold"`
	PlanMargin        float64  `mapstructure:"plan_margin" opt:"Control.PlanMargin"`
	StepMargin        float64  `mapstructure:"step_margin" opt:"Control.StepMargin"`
	Hysteresis        float64  `mapstructure:"hysteresis" opt:"Control.Hysteresis"`
	HoldMS            float64  `mapstructure:"hold_ms" opt:"Control.Hold"`
	CooldownMS        float64  `mapstructure:"cooldown_ms" opt:"Control.Cooldown"`
	LatencyCooldownMS float64  `mapstructure:"latency_cooldown_ms" opt:"Control.LatencyCooldown"`
	PowerFailMS       float64  `mapstructure:"power_fail_ms" opt:"Control.PowerFail"`
	MinLatencySamples int      `mapstructure:"min_latency_samples" opt:"Control.MinLatency"`
	MinProfiles       int      `mapstructure:"min_profiles" opt:"Control.MinProfiles"`
	Searcher          string   `mapstructure:"searcher" opt:"Control.Searcher"`
	MaxProfiles       int      `mapstructure:"max_profiles" opt:"Control.MaxProfiles"`
	NoiseRel          float64  `mapstructure:"noise_rel" opt:"Control.NoiseRel"`
	PlanConfidence    float64  `mapstructure:"plan_confidence" opt:"Control.Confidence"`
	Events            int      `mapstructure:"events" opt:"Control.Events"`
	InferBatches      []int    `mapstructure:"infer_batches" opt:"Control.InferBatches"`
	ExternalChange    string   `mapstructure:"external_change" opt:"Control.ExternalChange"`
	Live              liveKeys `mapstructure:"live"`
}

type liveKeys struct {
	Warmup    int     `mapstructure:"warmup" opt:"Control.Live.Warmup"`
	Samples   int     `mapstructure:"samples" opt:"Control.Live.Samples"`
	MinTimeMS float64 `mapstructure:"min_time_ms" opt:"Control.Live.MinTime"`
}

type apiKeys struct {
	SocketMode os.FileMode `mapstructure:"socket_mode" opt:"API.SocketMode"` // octal string in the file: "0660"
	Group      string      `mapstructure:"group" opt:"API.Group"`
	AllowUIDs  []int       `mapstructure:"allow_uids" opt:"API.AllowUIDs"`
	AllowGIDs  []int       `mapstructure:"allow_gids" opt:"API.AllowGIDs"`
}

type metricKeys struct {
	Listen string `mapstructure:"listen" opt:"MetricsListen"`
}

type workerKeys struct {
	SocketMode        os.FileMode `mapstructure:"socket_mode" opt:"Server.SocketMode"` // octal string in the file: "0660"
	MaxLineBytes      int         `mapstructure:"max_line_bytes" opt:"Server.MaxLineBytes"`
	MaxWorkers        int         `mapstructure:"max_workers" opt:"Server.MaxWorkers"`
	MaxPerProcess     int         `mapstructure:"max_per_process" opt:"Server.MaxPerProcess"`
	ReservedSlots     int         `mapstructure:"reserved_slots" opt:"Server.ReservedSlots"`
	WriteTimeoutMS    float64     `mapstructure:"write_timeout_ms" opt:"Server.WriteTimeout"`
	RegisterTimeoutMS float64     `mapstructure:"register_timeout_ms" opt:"Server.RegisterTimeout"`
	HoldFactor        float64     `mapstructure:"hold_factor" opt:"Server.Sched.HoldFactor"`
	HoldMinMS         float64     `mapstructure:"hold_min_ms" opt:"Server.Sched.HoldMin"`
	HoldMaxMS         float64     `mapstructure:"hold_max_ms" opt:"Server.Sched.HoldMax"`
	// Group owns worker.sock; "" (the default): control.group's.
	Group string `mapstructure:"group" opt:"Server.Group"`
}

// Settings is the validated configuration.
type Settings struct {
	Daemon    daemon.Options // its Budgets are the operator's targets from budgets.*
	LogFormat string
	LogLevel  slog.Level
}

// defaultFileConfig is the configuration when nothing is set: the daemon's, scheduler's
// and controller's DefaultConfig read back into the file's keys, plus fulcrumd's own
// (log, budgets.rate "auto": measure the rate).
func defaultFileConfig() fileConfig {
	o := daemon.DefaultOptions()
	f := fileConfig{
		Log:     logKeys{Format: "text", Level: "info"},
		Budgets: budgetKeys{PowerW: o.Budgets.PowerMW / 1000, Rate: "auto", Quantile: o.Budgets.Quantile},
	}
	fv := reflect.ValueOf(&f).Elem()
	ov := reflect.ValueOf(o)
	for _, k := range keys() {
		if k.opt != "" {
			fromOption(fv.FieldByIndex(k.index), optField(ov, k.opt), k.unit)
		}
	}
	return f
}

// defaultValues maps every key to its default as configs/fulcrum.yaml writes it (socket
// modes as octal strings): viper's defaults, the flags' defaults.
func defaultValues() map[string]any {
	fv := reflect.ValueOf(defaultFileConfig())
	out := map[string]any{}
	for _, k := range keys() {
		x := fv.FieldByIndex(k.index).Interface()
		if m, ok := x.(os.FileMode); ok {
			x = fmt.Sprintf("%04o", uint32(m))
		}
		out[k.name] = x
	}
	return out
}

func newViper() *viper.Viper {
	v := viper.New()
	for k, d := range defaultValues() {
		v.SetDefault(k, d) // also what makes AutomaticEnv look the key up
	}
	v.SetEnvPrefix("FULCRUM")
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	return v
}

// readConfigFile loads path, or the default path when it exists and path is empty.
func readConfigFile(v *viper.Viper, path string) error {
	explicit := path != ""
	if !explicit {
		if _, err := os.Stat(DefaultConfigPath); err != nil {
			return nil
		}
		path = DefaultConfigPath
	}
	v.SetConfigFile(path)
	v.SetConfigType("yaml")
	if err := v.ReadInConfig(); err != nil {
		return fmt.Errorf("read config %s: %w (fix the YAML, or see configs/fulcrum.yaml for every key)", path, err)
	}
	// UnmarshalExact refuses unknown keys too, but only here is the file's name known.
	known := map[string]bool{}
	for _, k := range keys() {
		known[k.name] = true
	}
	for _, k := range v.AllKeys() {
		if !known[k] && v.InConfig(k) {
			return fmt.Errorf("config %s: unknown key %q (see configs/fulcrum.yaml for every key)", path, k)
		}
	}
	return nil
}

// settings decodes v into the typed configuration and validates it: every range error
// names its key.
func settings(v *viper.Viper) (Settings, error) {
	var f fileConfig
	if err := v.UnmarshalExact(&f, decodeHooks()); err != nil {
		return Settings{}, fmt.Errorf("invalid configuration: %w", decodeErrors(err))
	}
	var s Settings
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	// The file's budgets in plan's units (power_w is watts in the file, mW in plan); the
	// ranges are plan's (ValidateTargets below), named here by the file's keys.
	b := f.Budgets
	budgets := plan.Budgets{LatencyMS: b.LatencyMS, PowerMW: b.PowerW * 1000, Quantile: b.Quantile}
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

	s.LogFormat = f.Log.Format
	if s.LogFormat != "text" && s.LogFormat != "json" {
		bad(`log.format must be "text" or "json", got %q`, s.LogFormat)
	}
	if err := s.LogLevel.UnmarshalText([]byte(f.Log.Level)); err != nil {
		bad(`log.level must be debug, info, warn or error, got %q`, f.Log.Level)
	}

	searcher := f.Controller.Searcher
	if err := search.CheckLive(searcher); err != nil {
		bad("controller.%v", err)
	}

	s.Daemon = f.toOptions()
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
	s.Daemon.Budgets = budgets
	if err := budgets.ValidateTargets(); err != nil {
		for _, e := range unjoin(err) {
			var re *plan.RangeError
			switch {
			case errors.As(e, &re) && re.Field == plan.FieldPower:
				// The file writes watts; plan's message speaks milliwatts.
				bad("budgets.power_w must be 0 (no power budget) or %g to %g W, got %v", plan.MinPowerMW/1000, plan.MaxPowerMW/1000, b.PowerW)
				continue
			case errors.As(e, &re) && re.Field == plan.FieldLatency && b.LatencyMS <= 0:
				continue // the scheduler's check already said so
			case errors.As(e, &re) && budgetKeyOf(re.Field) != "":
				bad("budgets.%s: %v", budgetKeyOf(re.Field), e)
				continue
			}
			bad("budgets: %v", e)
		}
	}
	if len(errs) > 0 {
		return Settings{}, fmt.Errorf("invalid configuration: %w", errors.Join(errs...))
	}
	return s, nil
}

// budgetKeyOf names plan's budget fields by the configuration's keys ("" for none).
func budgetKeyOf(field string) string {
	switch field {
	case plan.FieldLatency:
		return "latency_ms"
	case plan.FieldPower:
		return "power_w"
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

// decodeHooks read what the file, environment and flags write into fileConfig's types.
func decodeHooks() viper.DecoderConfigOption {
	return viper.DecodeHook(mapstructure.ComposeDecodeHookFunc(trimNumbers, intListHook, fileModeHook))
}

// toOptions copies every key with an opt tag into its daemon.Options field.
func (f fileConfig) toOptions() daemon.Options {
	var o daemon.Options
	fv := reflect.ValueOf(f)
	ov := reflect.ValueOf(&o).Elem()
	for _, k := range keys() {
		if k.opt != "" {
			toOption(optField(ov, k.opt), fv.FieldByIndex(k.index), k.unit)
		}
	}
	// An address with stray spaces (FULCRUM_METRICS_LISTEN=" :9464") would not bind.
	o.MetricsListen = strings.TrimSpace(o.MetricsListen)
	return o
}

// key is one leaf of fileConfig.
type key struct {
	name  string        // dotted key: "scheduler.margin_ms"
	opt   string        // daemon.Options field path, "" when settings handles it
	unit  time.Duration // for *_ms and *_s keys: what 1 in the file is
	index []int         // field index path in fileConfig
}

// keys lists fileConfig's leaves in declaration order.
func keys() []key {
	var out []key
	var walk func(t reflect.Type, prefix string, index []int)
	walk = func(t reflect.Type, prefix string, index []int) {
		for i := range t.NumField() {
			sf := t.Field(i)
			name := prefix + sf.Tag.Get("mapstructure")
			idx := append(slices.Clone(index), i)
			if sf.Type.Kind() == reflect.Struct {
				walk(sf.Type, name+".", idx)
				continue
			}
			k := key{name: name, opt: sf.Tag.Get("opt"), index: idx}
			switch {
			case strings.HasSuffix(name, "_ms"):
				k.unit = time.Millisecond
			case strings.HasSuffix(name, "_s"):
				k.unit = time.Second
			}
			out = append(out, k)
		}
	}
	walk(reflect.TypeFor[fileConfig](), "", nil)
	return out
}

// keyOf is the key that sets the daemon.Options field path (named by the path itself
// when no key does).
func keyOf(optPath string) key {
	for _, k := range keys() {
		if k.opt == optPath {
			return k
		}
	}
	return key{name: optPath}
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
		switch inner := de.Unwrap(); {
		case errors.As(inner, &pe):
			out = append(out, fmt.Errorf("%s: %q is not %s", de.Name(), fmt.Sprint(pe.Value), kindName(pe.Expected.Kind())))
		case errors.As(inner, &ue):
			out = append(out, fmt.Errorf("%s: want %s, got %v", de.Name(), kindName(ue.Expected.Kind()), ue.Value))
		default:
			out = append(out, fmt.Errorf("%s: %w", de.Name(), inner))
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

var durationType = reflect.TypeFor[time.Duration]()

// optField is the field at a dotted Go path in a daemon.Options value.
func optField(v reflect.Value, path string) reflect.Value {
	for _, name := range strings.Split(path, ".") {
		v = v.FieldByName(name)
		if !v.IsValid() {
			panic("fulcrumd config: no daemon.Options field " + path) // a wrong opt tag: every test catches it
		}
	}
	return v
}

// toOption sets an Options field from a file value: a number in the key's unit becomes a
// time.Duration, lists are copied, everything else converts directly.
func toOption(dst, src reflect.Value, unit time.Duration) {
	switch {
	case dst.Type() == durationType:
		if unit == 0 {
			panic("fulcrumd config: duration field without a _ms or _s key") // caught by every test
		}
		dst.SetInt(int64(time.Duration(src.Float() * float64(unit))))
	case src.Kind() == reflect.Slice:
		dst.Set(reflect.ValueOf(append([]int{}, src.Interface().([]int)...))) // a copy; empty, not nil, as the file's []
	default:
		dst.Set(src.Convert(dst.Type()))
	}
}

// fromOption is toOption's inverse, for the defaults.
func fromOption(dst, src reflect.Value, unit time.Duration) {
	switch {
	case src.Type() == durationType:
		dst.SetFloat(float64(src.Int()) / float64(unit))
	case src.Kind() == reflect.Slice:
		dst.Set(reflect.ValueOf(append([]int{}, src.Interface().([]int)...))) // a copy; empty, not nil, as the file's []
	default:
		dst.Set(src.Convert(dst.Type()))
	}
}

// trimNumbers lets numbers from environment variables and flags carry spaces
// (FULCRUM_BUDGETS_LATENCY_MS=" 50"), as the getters this decoder replaced did.
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
