/*
 * A test double of NVIDIA's NVML (libnvidia-ml.so.1) for machines without a GPU.
 *
 * It exports the real function names with the real signatures, struct layouts
 * and return codes (nvml.h), so the real pynvml loads it unchanged. What the
 * "hardware" reports comes from a scenario file named by the environment
 * variable ONECAT_NVML_DOUBLE_SCENARIO, read at nvmlInit time. Format: one
 * `key = value` per line, `#` comments, `include = other.scenario` (relative
 * to the including file; later keys win). A key that is absent makes the
 * function answer NVML_ERROR_NOT_SUPPORTED, like a GPU or driver without that
 * feature; a value `ERR:<code>` makes it answer that NVML return code.
 * `fail.<function> = <code>` or `gpu.<i>.fail.<function> = <code>` makes a
 * whole call fail. A function missing from an older driver (FUNCTION_NOT_FOUND
 * in pynvml) is emulated at build time by hiding the symbol (see build.py).
 * Timelines: `key@<seconds> = value` takes effect once that many seconds have
 * passed since nvmlInit (an ECC counter rising under load, a throttle reason
 * appearing, a GPU falling off the bus: `device_count@30 = 1`), or since the Unix
 * time in ONECAT_NVML_DOUBLE_START when it is set (one hardware clock for every
 * reading process, as a real card has). A later entry ends an earlier one: a
 * slowdown from 30 s to 40 s is `reasons@30 = 0x88` then `reasons@40 = 0`.
 * `gpu.<i>.lost = 1` is a GPU the driver lost (Xid 79) but still counts: nvml.h says
 * nvmlDeviceGetHandleByIndex and every per-device call answer NVML_ERROR_GPU_IS_LOST
 * (15) "if the target GPU has fallen off the bus or is otherwise inaccessible", while
 * nvmlDeviceGetCount keeps counting it until the driver reloads.
 * Scopes: `key!reset = value` holds until GPU <i> of that gpu.<i>.* key is reset (nvidia-smi -r
 * records it in $ONECAT_TEST_RUN_DIR/gpu-reset/<i>, default /run/onecat-test) or the node
 * reboots; `key!reboot = value` until the node reboots. A scoped entry that still holds wins
 * over the same key without a scope (so the base value answers once it is cleared: a reset
 * reads the volatile ECC counters and the pending retirement of the included healthy scenario).
 * With a timeline the scope comes last: `key@30!reset = 1`. A scoped fault takes effect at its
 * timeline time, or without one when the scenario was written (the newest mtime of its files);
 * a reset or boot after that moment clears it. `gpu.<i>.recur_after = S` brings GPU i's cleared
 * faults back S seconds after the reset or boot that cleared them (a card that really is bad).
 * Boot: ONECAT_NVML_DOUBLE_BOOT (Unix seconds) or the start of PID 1 (btime in /proc/stat plus
 * starttime in /proc/1/stat): a simulated node's reboot is its container's restart.
 * Events (nvmlEventSetCreate, nvmlDeviceRegisterEvents, nvmlEventSetWait_v2): `gpu.<i>.events`
 * is the mask nvmlDeviceGetSupportedEventTypes answers; `gpu.<i>.xid_event@<seconds> = <code>`
 * is an Xid that happens at that time on the timeline (untimed: when the scenario was written),
 * delivered once to every set registered for Xid events on that GPU before it happened.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef int nvmlReturn_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_TIMEOUT 10
#define NVML_ERROR_GPU_IS_LOST 15
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25
#define NVML_ERROR_UNKNOWN 999

#define NVML_VALUE_NOT_AVAILABLE (~0ULL)
#define NVML_MEMORY_V2_VERSION 0x02000028u
#define MAX_DEVICES 16
#define MAX_ENTRIES 8192
#define MAX_INCLUDE_DEPTH 8

typedef struct nvmlDevice_st {
    unsigned int index;
} *nvmlDevice_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t; /* v3 layout */

typedef struct {
    char busId[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    unsigned int reserved0, reserved1, reserved2, reserved3;
} nvmlPciInfo_v2_t; /* layout of nvmlDeviceGetPciInfo and _v2 */

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t; /* v2 and v3 share this layout */

/* ---- scenario store ---------------------------------------------------- */

#define SCOPE_NONE 0
#define SCOPE_RESET 1  /* key!reset: until GPU <gpu> is reset or the node reboots */
#define SCOPE_REBOOT 2 /* key!reboot: until the node reboots */

static struct {
    char *key;
    char *value;
    double after; /* seconds since nvmlInit before the entry applies (timelines) */
    int timed;    /* key@<seconds> */
    int scope;    /* SCOPE_* */
    int gpu;      /* <i> of a gpu.<i>.* key, else -1 */
} entries[MAX_ENTRIES];
static struct timespec init_time;
static double init_epoch;          /* nvmlInit on the wall clock (Unix seconds) */
static double scenario_mtime;      /* newest mtime of the scenario's files: when it was written */
static double boot_epoch;          /* the node's boot (Unix seconds); <0: not read yet */
static double boot_override = -1;  /* ONECAT_NVML_DOUBLE_BOOT */
static int any_scoped;
/* ONECAT_NVML_DOUBLE_START (Unix seconds): the hardware's clock. A real GPU heats, throttles
 * and fails on the wall clock, whoever reads it: the watch reads it from a new process every
 * interval, the burn-in every second. With the variable set, timelines count from it (every
 * process sees one timeline); without it, from nvmlInit in the reading process. */
static double start_epoch = -1;

static double seconds_since_init(void) {
    struct timespec now;
    if (start_epoch >= 0) {
        clock_gettime(CLOCK_REALTIME, &now);
        return (double)now.tv_sec + now.tv_nsec / 1e9 - start_epoch;
    }
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - init_time.tv_sec) + (now.tv_nsec - init_time.tv_nsec) / 1e9;
}
static double wall_now(void) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (double)now.tv_sec + now.tv_nsec / 1e9;
}

/* The node's boot: the start of PID 1 (a simulated node's reboot restarts its container, whose
 * PID 1 is systemd; on a machine, PID 1 starts at boot), or ONECAT_NVML_DOUBLE_BOOT. 0 (never
 * booted after anything) when it cannot be read. Read once per nvmlInit: no process outlives a
 * reboot. */
static double boot_time(void) {
    if (boot_epoch >= 0) return boot_epoch;
    boot_epoch = 0;
    if (boot_override >= 0) return boot_epoch = boot_override;
    FILE *f = fopen("/proc/stat", "r");
    char line[512];
    double btime = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "btime %lf", &btime) == 1) break;
    if (f) fclose(f);
    f = fopen("/proc/1/stat", "r");
    if (!f || btime < 0) {
        if (f) fclose(f);
        return boot_epoch;
    }
    char stat[1024];
    size_t n = fread(stat, 1, sizeof stat - 1, f);
    fclose(f);
    stat[n] = '\0';
    char *p = strrchr(stat, ')'); /* the command may hold spaces and parentheses */
    unsigned long long start = 0;
    /* After "(comm)": state is field 3, starttime field 22. */
    if (p && sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d "
                           "%*d %*d %llu", &start) == 1) {
        long tick = sysconf(_SC_CLK_TCK);
        boot_epoch = btime + (double)start / (double)(tick > 0 ? tick : 100);
    }
    return boot_epoch;
}

/* When GPU <gpu> was last reset: $ONECAT_TEST_RUN_DIR/gpu-reset/<gpu> holds the Unix seconds
 * (nvidia-smi -r writes them; /run is a tmpfs, a reboot empties it). The file's own mtime
 * refines a reset within that second. -1: none recorded. */
static double reset_time(int gpu) {
    const char *run = getenv("ONECAT_TEST_RUN_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/gpu-reset/%d", run && *run ? run : "/run/onecat-test", gpu);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    double at = -1;
    long long seconds;
    struct stat st;
    if (fscanf(f, "%lld", &seconds) == 1) {
        at = (double)seconds;
        if (fstat(fileno(f), &st) == 0 && st.st_mtim.tv_sec == seconds)
            at = (double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec / 1e9;
    }
    fclose(f);
    return at;
}

static const char *lookup_plain(const char *key);

/* Does scoped entry i still hold? It took effect at its timeline time (else when the scenario
 * was written); the latest reset of its GPU (!reset only) or boot after that clears it, until
 * gpu.<i>.recur_after seconds later. */
static int scoped_holds(int i) {
    double origin = start_epoch >= 0 ? start_epoch : init_epoch;
    double effect = entries[i].timed ? origin + entries[i].after : scenario_mtime;
    double cleared = -1, boot = boot_time();
    if (boot > effect) cleared = boot;
    if (entries[i].scope == SCOPE_RESET) {
        double reset = reset_time(entries[i].gpu);
        if (reset > effect && reset > cleared) cleared = reset;
    }
    if (cleared < 0) return 1;
    if (entries[i].gpu >= 0) {
        char key[64];
        snprintf(key, sizeof key, "gpu.%d.recur_after", entries[i].gpu);
        const char *recur = lookup_plain(key);
        if (recur && strncmp(recur, "ERR:", 4) != 0 && wall_now() >= cleared + strtod(recur, NULL))
            return 1;
    }
    return 0;
}

static int n_entries;
static int init_refcount;
static struct nvmlDevice_st devices[MAX_DEVICES];

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    char *end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1])) *--end = '\0';
    return s;
}

static void clear_scenario(void) {
    for (int i = 0; i < n_entries; i++) {
        free(entries[i].key);
        free(entries[i].value);
    }
    n_entries = 0;
}

static int load_file(const char *path, int depth) {
    if (depth > MAX_INCLUDE_DEPTH) {
        fprintf(stderr, "nvml double: include nesting too deep at %s\n", path);
        return -1;
    }
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "nvml double: cannot read scenario %s\n", path);
        return -1;
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0) {
        double written = (double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec / 1e9;
        if (written > scenario_mtime) scenario_mtime = written;
    }
    char line[1024];
    int rc = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        char *eq = strchr(line, '=');
        if (!eq) continue;
        *eq = '\0';
        char *key = trim(line), *value = trim(eq + 1);
        if (!*key) continue;
        if (strcmp(key, "include") == 0) {
            char full[2048];
            const char *slash = strrchr(path, '/');
            if (value[0] != '/' && slash)
                snprintf(full, sizeof full, "%.*s/%s", (int)(slash - path), path, value);
            else
                snprintf(full, sizeof full, "%s", value);
            rc = load_file(full, depth + 1);
            continue;
        }
        if (n_entries == MAX_ENTRIES) {
            fprintf(stderr, "nvml double: too many keys in %s\n", path);
            rc = -1;
            break;
        }
        int scope = SCOPE_NONE, gpu = -1;
        char *bang = strchr(key, '!');
        if (bang) {
            *bang = '\0';
            char *name = trim(bang + 1);
            if (strcmp(name, "reset") == 0) scope = SCOPE_RESET;
            else if (strcmp(name, "reboot") == 0) scope = SCOPE_REBOOT;
            else {
                fprintf(stderr, "nvml double: unknown scope !%s in %s (%s)\n", name, key, path);
                rc = -1;
                break;
            }
            key = trim(key);
            any_scoped = 1;
        }
        double after = 0;
        char *at = strchr(key, '@');
        if (at) {
            char *end;
            *at = '\0';
            after = strtod(at + 1, &end);
            if (end == at + 1 || *trim(end) || after < 0) {
                fprintf(stderr, "nvml double: bad time in %s@%s (%s)\n", key, at + 1, path);
                rc = -1;
                break;
            }
            key = trim(key);
        }
        unsigned int index;
        int consumed = 0;
        if (sscanf(key, "gpu.%u.%n", &index, &consumed) == 1 && consumed > 0) gpu = (int)index;
        if (scope == SCOPE_RESET && gpu < 0) {
            fprintf(stderr, "nvml double: %s!reset names no GPU (gpu.<i>.*) to reset (%s)\n", key,
                    path);
            rc = -1;
            break;
        }
        entries[n_entries].key = strdup(key);
        entries[n_entries].value = strdup(value);
        entries[n_entries].after = after;
        entries[n_entries].timed = at != NULL;
        entries[n_entries].scope = scope;
        entries[n_entries].gpu = gpu;
        n_entries++;
    }
    fclose(f);
    return rc;
}

/* The last definition of a key that applies by now wins, so an including file can
 * override, and a timeline entry overrides once its time has come. A scoped entry (!reset,
 * !reboot) that still holds wins over every entry without a scope. */
static const char *find(const char *key, int scoped) {
    double elapsed = -1;
    for (int i = n_entries - 1; i >= 0; i--) {
        if ((entries[i].scope != SCOPE_NONE) != scoped || strcmp(entries[i].key, key) != 0)
            continue;
        if (entries[i].after > 0) {
            if (elapsed < 0) elapsed = seconds_since_init();
            if (elapsed < entries[i].after) continue;
        }
        if (scoped && !scoped_holds(i)) continue;
        return entries[i].value;
    }
    return NULL;
}

static const char *lookup_plain(const char *key) { return find(key, 0); }

static const char *lookup(const char *key) {
    const char *v = any_scoped ? find(key, 1) : NULL;
    return v ? v : find(key, 0);
}

static nvmlReturn_t err_value(const char *v) {
    return (strncmp(v, "ERR:", 4) == 0) ? (nvmlReturn_t)strtol(v + 4, NULL, 0) : NVML_SUCCESS;
}

static nvmlReturn_t get_str(const char *key, const char **out) {
    const char *v = lookup(key);
    if (!v) return NVML_ERROR_NOT_SUPPORTED;
    nvmlReturn_t r = err_value(v);
    if (r) return r;
    *out = v;
    return NVML_SUCCESS;
}

static nvmlReturn_t get_ull(const char *key, unsigned long long *out) {
    const char *v;
    nvmlReturn_t r = get_str(key, &v);
    if (r) return r;
    if (strcmp(v, "NA") == 0) {
        *out = NVML_VALUE_NOT_AVAILABLE;
        return NVML_SUCCESS;
    }
    *out = strtoull(v, NULL, 0);
    return NVML_SUCCESS;
}

static nvmlReturn_t dev_ull(nvmlDevice_t d, const char *sub, unsigned long long *out) {
    char key[256];
    snprintf(key, sizeof key, "gpu.%u.%s", d->index, sub);
    return get_ull(key, out);
}

static nvmlReturn_t dev_uint(nvmlDevice_t d, const char *sub, unsigned int *out) {
    unsigned long long v;
    nvmlReturn_t r = dev_ull(d, sub, &v);
    if (r == NVML_SUCCESS) *out = (unsigned int)v;
    return r;
}

static nvmlReturn_t dev_str(nvmlDevice_t d, const char *sub, const char **out) {
    char key[256];
    snprintf(key, sizeof key, "gpu.%u.%s", d->index, sub);
    return get_str(key, out);
}

static unsigned int device_count(void) {
    unsigned long long n = 0;
    get_ull("device_count", &n);
    return n > MAX_DEVICES ? MAX_DEVICES : (unsigned int)n;
}

static nvmlReturn_t copy_out(const char *value, char *buf, unsigned int length) {
    if (!buf) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, value, strlen(value) + 1);
    return NVML_SUCCESS;
}

/* A GPU lost to the driver: still counted, every call on it answers GPU_IS_LOST. */
static int gpu_lost(unsigned int index) {
    char key[64];
    unsigned long long lost = 0;
    snprintf(key, sizeof key, "gpu.%u.lost", index);
    return get_ull(key, &lost) == NVML_SUCCESS && lost != 0;
}

/* Every entry point: initialised?, a valid handle?, a fault injected? */
static nvmlReturn_t enter(const char *fn, nvmlDevice_t d) {
    if (init_refcount == 0) return NVML_ERROR_UNINITIALIZED;
    char key[256];
    unsigned long long code;
    if (d) {
        if (d < devices || d >= devices + device_count()) return NVML_ERROR_INVALID_ARGUMENT;
        if (gpu_lost(d->index)) return NVML_ERROR_GPU_IS_LOST;
        snprintf(key, sizeof key, "gpu.%u.fail.%s", d->index, fn);
        if (get_ull(key, &code) == NVML_SUCCESS) return (nvmlReturn_t)code;
    }
    snprintf(key, sizeof key, "fail.%s", fn);
    if (get_ull(key, &code) == NVML_SUCCESS) return (nvmlReturn_t)code;
    return NVML_SUCCESS;
}

#define ENTER(d)                                        \
    do {                                                \
        nvmlReturn_t enter_rc_ = enter(__func__, (d));  \
        if (enter_rc_) return enter_rc_;                \
    } while (0)

#define NEED(p)                                                \
    do {                                                       \
        if (!(p)) return NVML_ERROR_INVALID_ARGUMENT;          \
    } while (0)

/* ---- init, shutdown, errors ------------------------------------------- */

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    if (init_refcount > 0) {
        init_refcount++;
        return NVML_SUCCESS;
    }
    const char *path = getenv("ONECAT_NVML_DOUBLE_SCENARIO");
    clear_scenario();
    if (!path || !*path) {
        fprintf(stderr, "nvml double: ONECAT_NVML_DOUBLE_SCENARIO is not set\n");
        return NVML_ERROR_UNKNOWN;
    }
    clock_gettime(CLOCK_MONOTONIC, &init_time);
    init_epoch = wall_now();
    scenario_mtime = 0;
    any_scoped = 0;
    boot_epoch = -1;
    boot_override = -1;
    const char *boot = getenv("ONECAT_NVML_DOUBLE_BOOT");
    if (boot && *boot) {
        char *end;
        double at = strtod(boot, &end);
        if (end == boot || *end || at < 0) {
            fprintf(stderr, "nvml double: ONECAT_NVML_DOUBLE_BOOT=%s is not Unix seconds\n", boot);
            return NVML_ERROR_UNKNOWN;
        }
        boot_override = at;
    }
    const char *start = getenv("ONECAT_NVML_DOUBLE_START");
    start_epoch = -1;
    if (start && *start) {
        char *end;
        double at = strtod(start, &end);
        if (end == start || *end || at < 0) {
            fprintf(stderr, "nvml double: ONECAT_NVML_DOUBLE_START=%s is not Unix seconds\n", start);
            return NVML_ERROR_UNKNOWN;
        }
        start_epoch = at;
    }
    if (load_file(path, 0) != 0) return NVML_ERROR_UNKNOWN;
    unsigned long long init_rc = 0;
    get_ull("init", &init_rc);
    if (init_rc) return (nvmlReturn_t)init_rc;
    for (unsigned int i = 0; i < MAX_DEVICES; i++) devices[i].index = i;
    init_refcount = 1;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    if (init_refcount == 0) return NVML_ERROR_UNINITIALIZED;
    init_refcount--;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 5: return "Already Initialized";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 8: return "Insufficient External Power";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 11: return "Interrupt Request Issue";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 14: return "Corrupted infoROM";
    case 15: return "GPU is lost";
    case 16: return "GPU requires restart";
    case 17: return "The operating system has blocked the request.";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    case 25: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

/* ---- system ------------------------------------------------------------ */

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    ENTER(NULL);
    const char *v;
    nvmlReturn_t r = get_str("driver_version", &v);
    return r ? r : copy_out(v, version, length);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    ENTER(NULL);
    const char *v;
    nvmlReturn_t r = get_str("nvml_version", &v);
    return r ? r : copy_out(v, version, length);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion) {
    ENTER(NULL);
    NEED(cudaDriverVersion);
    unsigned long long v;
    nvmlReturn_t r = get_ull("cuda_driver_version", &v);
    if (r == NVML_SUCCESS) *cudaDriverVersion = (int)v;
    return r;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion) {
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length) {
    ENTER(NULL);
    char key[64];
    const char *v;
    snprintf(key, sizeof key, "process.%u.name", pid);
    if (!lookup(key)) return NVML_ERROR_NOT_FOUND;
    nvmlReturn_t r = get_str(key, &v);
    return r ? r : copy_out(v, name, length);
}

/* ---- enumeration ------------------------------------------------------- */

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) {
    ENTER(NULL);
    NEED(deviceCount);
    *deviceCount = device_count();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount) { return nvmlDeviceGetCount_v2(deviceCount); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    ENTER(NULL);
    NEED(device);
    if (index >= device_count()) return NVML_ERROR_INVALID_ARGUMENT;
    if (gpu_lost(index)) return NVML_ERROR_GPU_IS_LOST;
    *device = &devices[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    ENTER(device);
    NEED(index);
    *index = device->index;
    return NVML_SUCCESS;
}

/* ---- identity ---------------------------------------------------------- */

static nvmlReturn_t dev_string_out(nvmlDevice_t d, const char *sub, char *buf, unsigned int len) {
    const char *v;
    nvmlReturn_t r = dev_str(d, sub, &v);
    return r ? r : copy_out(v, buf, len);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    ENTER(device);
    return dev_string_out(device, "name", name, length);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    ENTER(device);
    return dev_string_out(device, "uuid", uuid, length);
}

nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length) {
    ENTER(device);
    return dev_string_out(device, "serial", serial, length);
}

static nvmlReturn_t read_pci(nvmlDevice_t d, unsigned int *domain, unsigned int *bus,
                             unsigned int *dev, unsigned int *id, unsigned int *subsys) {
    const char *bus_id;
    nvmlReturn_t r = dev_str(d, "pci.bus_id", &bus_id);
    if (r) return r;
    if (sscanf(bus_id, "%x:%x:%x", domain, bus, dev) != 3) return NVML_ERROR_UNKNOWN;
    *id = *subsys = 0;
    dev_uint(d, "pci.device_id", id);
    dev_uint(d, "pci.subsystem_id", subsys);
    return NVML_SUCCESS;
}

static nvmlReturn_t fill_pci_v3(nvmlDevice_t d, nvmlPciInfo_t *pci) {
    memset(pci, 0, sizeof *pci);
    nvmlReturn_t r = read_pci(d, &pci->domain, &pci->bus, &pci->device, &pci->pciDeviceId,
                              &pci->pciSubSystemId);
    if (r) return r;
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.0", pci->domain, pci->bus, pci->device);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", pci->domain, pci->bus,
             pci->device);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    ENTER(device);
    NEED(pci);
    return fill_pci_v3(device, pci);
}

static nvmlReturn_t fill_pci_legacy(nvmlDevice_t d, nvmlPciInfo_v2_t *pci) {
    memset(pci, 0, sizeof *pci);
    nvmlReturn_t r = read_pci(d, &pci->domain, &pci->bus, &pci->device, &pci->pciDeviceId,
                              &pci->pciSubSystemId);
    if (r) return r;
    snprintf(pci->busId, sizeof pci->busId, "%04X:%02X:%02X.0", pci->domain, pci->bus, pci->device);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_v2_t *pci) {
    ENTER(device);
    NEED(pci);
    return fill_pci_legacy(device, pci);
}

nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_v2_t *pci) {
    ENTER(device);
    NEED(pci);
    return fill_pci_legacy(device, pci);
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
    ENTER(device);
    NEED(major && minor);
    const char *v;
    nvmlReturn_t r = dev_str(device, "compute_capability", &v);
    if (r) return r;
    if (sscanf(v, "%d.%d", major, minor) != 2) return NVML_ERROR_UNKNOWN;
    return NVML_SUCCESS;
}

/* ---- memory and ECC ---------------------------------------------------- */

static nvmlReturn_t read_memory(nvmlDevice_t d, unsigned long long *total,
                                unsigned long long *used) {
    nvmlReturn_t r = dev_ull(d, "memory.total_mib", total);
    if (r) return r;
    r = dev_ull(d, "memory.used_mib", used);
    if (r) return r;
    *total <<= 20;
    *used <<= 20;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    ENTER(device);
    NEED(memory);
    unsigned long long total, used;
    nvmlReturn_t r = read_memory(device, &total, &used);
    if (r) return r;
    memory->total = total;
    memory->used = used;
    memory->free = total - used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    ENTER(device);
    NEED(memory);
    if (memory->version != NVML_MEMORY_V2_VERSION) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    unsigned long long total, used, reserved = 0;
    nvmlReturn_t r = read_memory(device, &total, &used);
    if (r) return r;
    dev_ull(device, "memory.reserved_mib", &reserved);
    reserved <<= 20;
    memory->total = total;
    memory->reserved = reserved;
    memory->used = used;
    memory->free = total - used - reserved;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, int *current, int *pending) {
    ENTER(device);
    NEED(current && pending);
    unsigned int cur, pend;
    nvmlReturn_t r = dev_uint(device, "ecc.mode", &cur);
    if (r) return r;
    if (dev_uint(device, "ecc.pending_mode", &pend) != NVML_SUCCESS) pend = cur;
    *current = (int)cur;
    *pending = (int)pend;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int errorType, int counterType,
                                         unsigned long long *eccCounts) {
    ENTER(device);
    NEED(eccCounts);
    static const char *types[] = {"corrected", "uncorrected"};
    static const char *counters[] = {"volatile", "aggregate"};
    if (errorType < 0 || errorType > 1 || counterType < 0 || counterType > 1)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int mode;
    if (dev_uint(device, "ecc.mode", &mode) != NVML_SUCCESS) return NVML_ERROR_NOT_SUPPORTED;
    char sub[64];
    snprintf(sub, sizeof sub, "ecc.%s.%s", counters[counterType], types[errorType]);
    return dev_ull(device, sub, eccCounts);
}

static nvmlReturn_t retired_pages(nvmlDevice_t d, int cause, unsigned int *pageCount,
                                  unsigned long long *addresses, unsigned long long *timestamps) {
    NEED(pageCount);
    if (cause < 0 || cause > 1) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int n;
    nvmlReturn_t r = dev_uint(d, cause == 0 ? "retired.single_bit" : "retired.double_bit", &n);
    if (r) return r;
    if (*pageCount < n || (n > 0 && !addresses)) {
        *pageCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < n; i++) {
        addresses[i] = 0x7f0000ULL + 0x1000ULL * (unsigned long long)(cause * 1000 + i);
        if (timestamps) timestamps[i] = 1767225600ULL + i;
    }
    *pageCount = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, int cause, unsigned int *pageCount,
                                       unsigned long long *addresses) {
    ENTER(device);
    return retired_pages(device, cause, pageCount, addresses, NULL);
}

nvmlReturn_t nvmlDeviceGetRetiredPages_v2(nvmlDevice_t device, int cause, unsigned int *pageCount,
                                          unsigned long long *addresses,
                                          unsigned long long *timestamps) {
    ENTER(device);
    return retired_pages(device, cause, pageCount, addresses, timestamps);
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, int *isPending) {
    ENTER(device);
    NEED(isPending);
    unsigned int v;
    nvmlReturn_t r = dev_uint(device, "retired.pending", &v);
    if (r == NVML_SUCCESS) *isPending = (int)v;
    return r;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows,
                                       unsigned int *uncRows, unsigned int *isPending,
                                       unsigned int *failureOccurred) {
    ENTER(device);
    NEED(corrRows && uncRows && isPending && failureOccurred);
    nvmlReturn_t r = dev_uint(device, "remapped.correctable", corrRows);
    if (!r) r = dev_uint(device, "remapped.uncorrectable", uncRows);
    if (!r) r = dev_uint(device, "remapped.pending", isPending);
    if (!r) r = dev_uint(device, "remapped.failure", failureOccurred);
    return r;
}

/* ---- PCIe, thermals, power, clocks ------------------------------------- */

#define DEV_UINT_GETTER(fn, sub)                                  \
    nvmlReturn_t fn(nvmlDevice_t device, unsigned int *out) {     \
        ENTER(device);                                            \
        NEED(out);                                                \
        return dev_uint(device, sub, out);                        \
    }

DEV_UINT_GETTER(nvmlDeviceGetCurrPcieLinkGeneration, "pcie.gen")
DEV_UINT_GETTER(nvmlDeviceGetMaxPcieLinkGeneration, "pcie.max_gen")
DEV_UINT_GETTER(nvmlDeviceGetCurrPcieLinkWidth, "pcie.width")
DEV_UINT_GETTER(nvmlDeviceGetMaxPcieLinkWidth, "pcie.max_width")
DEV_UINT_GETTER(nvmlDeviceGetPowerUsage, "power.usage_mw")
DEV_UINT_GETTER(nvmlDeviceGetEnforcedPowerLimit, "power.limit_mw")
DEV_UINT_GETTER(nvmlDeviceGetPowerManagementLimit, "power.limit_mw")

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensorType, unsigned int *temp) {
    ENTER(device);
    NEED(temp);
    if (sensorType != 0) return NVML_ERROR_INVALID_ARGUMENT; /* only NVML_TEMPERATURE_GPU */
    return dev_uint(device, "temperature_c", temp);
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                    unsigned long long *reasons) {
    ENTER(device);
    NEED(reasons);
    return dev_ull(device, "clocks_event_reasons", reasons);
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                       unsigned long long *reasons) {
    ENTER(device);
    NEED(reasons);
    return dev_ull(device, "clocks_event_reasons", reasons);
}

/* nvmlEnableState_t getters. */
DEV_UINT_GETTER(nvmlDeviceGetPersistenceMode, "persistence_mode")
DEV_UINT_GETTER(nvmlDeviceGetDisplayActive, "display.active")
DEV_UINT_GETTER(nvmlDeviceGetDisplayMode, "display.mode")

/* ---- processes --------------------------------------------------------- */

/* NVML's two-call protocol: too small a buffer (or none) answers
 * INSUFFICIENT_SIZE with the needed count; no processes answers SUCCESS. */
static nvmlReturn_t processes(nvmlDevice_t d, const char *kind, unsigned int *count, void *infos,
                              size_t stride, int with_instances) {
    NEED(count);
    unsigned int n = 0;
    char sub[96];
    snprintf(sub, sizeof sub, "%s.count", kind);
    nvmlReturn_t r = dev_uint(d, sub, &n);
    if (r == NVML_ERROR_NOT_SUPPORTED) n = 0; /* no key: no processes */
    else if (r) return r;
    if (*count < n || (n > 0 && !infos)) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < n; i++) {
        char *slot = (char *)infos + i * stride;
        unsigned int pid = 0;
        unsigned long long used = 0;
        snprintf(sub, sizeof sub, "%s.%u.pid", kind, i);
        dev_uint(d, sub, &pid);
        snprintf(sub, sizeof sub, "%s.%u.used_mib", kind, i);
        dev_ull(d, sub, &used);
        if (used != NVML_VALUE_NOT_AVAILABLE) used <<= 20;
        if (with_instances) {
            nvmlProcessInfo_t *p = (nvmlProcessInfo_t *)slot;
            p->pid = pid;
            p->usedGpuMemory = used;
            p->gpuInstanceId = p->computeInstanceId = 0xFFFFFFFFu;
        } else {
            nvmlProcessInfo_v1_t *p = (nvmlProcessInfo_v1_t *)slot;
            p->pid = pid;
            p->usedGpuMemory = used;
        }
    }
    *count = n;
    return NVML_SUCCESS;
}

#define PROCESS_GETTER(fn, kind, type, inst)                                     \
    nvmlReturn_t fn(nvmlDevice_t device, unsigned int *infoCount, type *infos) { \
        ENTER(device);                                                           \
        return processes(device, kind, infoCount, infos, sizeof(type), inst);    \
    }

PROCESS_GETTER(nvmlDeviceGetComputeRunningProcesses_v3, "compute", nvmlProcessInfo_t, 1)
PROCESS_GETTER(nvmlDeviceGetComputeRunningProcesses_v2, "compute", nvmlProcessInfo_t, 1)
PROCESS_GETTER(nvmlDeviceGetComputeRunningProcesses, "compute", nvmlProcessInfo_v1_t, 0)
PROCESS_GETTER(nvmlDeviceGetGraphicsRunningProcesses_v3, "graphics", nvmlProcessInfo_t, 1)
PROCESS_GETTER(nvmlDeviceGetGraphicsRunningProcesses_v2, "graphics", nvmlProcessInfo_t, 1)
PROCESS_GETTER(nvmlDeviceGetGraphicsRunningProcesses, "graphics", nvmlProcessInfo_v1_t, 0)

/* ---- topology, P2P, NVLink --------------------------------------------- */

static nvmlReturn_t pair_ull(const char *prefix, nvmlDevice_t a, nvmlDevice_t b, const char *suffix,
                             unsigned long long *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%u.%u%s", prefix, a->index, b->index, suffix);
    if (lookup(key)) return get_ull(key, out);
    snprintf(key, sizeof key, "%s.%u.%u%s", prefix, b->index, a->index, suffix);
    return get_ull(key, out);
}

nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                 int *pathInfo) {
    ENTER(device1);
    ENTER(device2);
    NEED(pathInfo);
    if (device1 == device2) {
        *pathInfo = 0; /* NVML_TOPOLOGY_INTERNAL */
        return NVML_SUCCESS;
    }
    unsigned long long level;
    nvmlReturn_t r = pair_ull("topology", device1, device2, "", &level);
    if (r == NVML_SUCCESS) *pathInfo = (int)level;
    return r;
}

nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2, int p2pIndex,
                                    int *p2pStatus) {
    ENTER(device1);
    ENTER(device2);
    NEED(p2pStatus);
    static const char *caps[] = {".read", ".write", ".nvlink", ".atomics", ".prop"};
    if (p2pIndex < 0 || p2pIndex > 4) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long status;
    nvmlReturn_t r = pair_ull("p2p", device1, device2, caps[p2pIndex], &status);
    if (r == NVML_SUCCESS) *p2pStatus = (int)status;
    return r;
}

/* nvlink.links = how many links this GPU has (absent: no NVLink, every call
 * NOT_SUPPORTED, as on a PCIe V100); nvlink.<l>.remote = index of the GPU at
 * the far end of an active link; a link without it is inactive. */
static nvmlReturn_t nvlink_link(nvmlDevice_t d, unsigned int link, int *active,
                                unsigned int *remote) {
    unsigned int links;
    nvmlReturn_t r = dev_uint(d, "nvlink.links", &links);
    if (r) return r;
    if (link >= links) return NVML_ERROR_INVALID_ARGUMENT;
    char sub[64];
    snprintf(sub, sizeof sub, "nvlink.%u.remote", link);
    r = dev_uint(d, sub, remote);
    if (r == NVML_ERROR_NOT_SUPPORTED) {
        *active = 0;
        return NVML_SUCCESS;
    }
    *active = (r == NVML_SUCCESS);
    return r;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, int *isActive) {
    ENTER(device);
    NEED(isActive);
    unsigned int remote;
    return nvlink_link(device, link, isActive, &remote);
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                 nvmlPciInfo_t *pci) {
    ENTER(device);
    NEED(pci);
    int active;
    unsigned int remote;
    nvmlReturn_t r = nvlink_link(device, link, &active, &remote);
    if (r) return r;
    if (!active || remote >= device_count()) return NVML_ERROR_NOT_FOUND;
    return fill_pci_v3(&devices[remote], pci);
}

/* ---- events ------------------------------------------------------------ */
/* nvml.h, "Event Handling Methods" (NVIDIA/go-nvml gen/nvml/nvml.h):
 * - nvmlDeviceGetSupportedEventTypes answers the device's mask (`gpu.<i>.events`; absent: the
 *   double's NOT_SUPPORTED, as a driver without events; 0: an empty mask, as on Windows).
 * - nvmlDeviceRegisterEvents "starts recording of events on specific device. All events that
 *   occurred before this call are not recorded"; NOT_SUPPORTED "if the platform does not support
 *   this feature or some of requested event types", and then "None of the requested eventTypes
 *   are registered"; INVALID_ARGUMENT "if eventTypes is invalid or set is NULL".
 * - nvmlEventSetWait_v2: "If some events are ready to be delivered at the time of the call,
 *   function returns immediately. If there are no events ready to be delivered, function sleeps
 *   till event arrives but not longer than specified timeout"; NVML_ERROR_TIMEOUT (10) "if no
 *   event arrived in specified timeout"; GPU_IS_LOST (15) "if a GPU has fallen off the bus".
 *   "On Linux, every Xid error event would return the associated event data": one delivery per
 *   Xid per set; eventData is the Xid; gpuInstanceId/computeInstanceId are 0xFFFFFFFF without
 *   MIG (nvmlEventData_t).
 * - nvmlEventSetFree "Releases events in the set". */

#define EVENT_TYPE_ALL 0xFFFFULL      /* nvmlEventTypeAll: bits 0x1 to 0x8000 */
#define EVENT_TYPE_XID 0x8ULL         /* nvmlEventTypeXidCriticalError */
#define MAX_EVENT_SETS 8

typedef struct nvmlEventSet_st {
    int used;
    unsigned long long mask[MAX_DEVICES];
    double registered[MAX_DEVICES]; /* wall clock of the first registration per device */
    unsigned char delivered[MAX_ENTRIES];
} *nvmlEventSet_t;

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t;

static struct nvmlEventSet_st event_sets[MAX_EVENT_SETS];

static int valid_set(nvmlEventSet_t set) {
    return set >= event_sets && set < event_sets + MAX_EVENT_SETS && set->used;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    ENTER(NULL);
    NEED(set);
    for (int i = 0; i < MAX_EVENT_SETS; i++) {
        if (event_sets[i].used) continue;
        memset(&event_sets[i], 0, sizeof event_sets[i]);
        event_sets[i].used = 1;
        *set = &event_sets[i];
        return NVML_SUCCESS;
    }
    return NVML_ERROR_UNKNOWN;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    if (init_refcount == 0) return NVML_ERROR_UNINITIALIZED;
    if (!valid_set(set)) return NVML_ERROR_UNKNOWN;
    set->used = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes) {
    ENTER(device);
    NEED(eventTypes);
    return dev_ull(device, "events", eventTypes);
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                      nvmlEventSet_t set) {
    ENTER(device);
    if (!valid_set(set) || eventTypes == 0 || (eventTypes & ~EVENT_TYPE_ALL))
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long supported;
    nvmlReturn_t r = dev_ull(device, "events", &supported);
    if (r) return r;
    if (eventTypes & ~supported) return NVML_ERROR_NOT_SUPPORTED;
    if (!set->mask[device->index]) set->registered[device->index] = wall_now();
    set->mask[device->index] |= eventTypes;
    return NVML_SUCCESS;
}

/* The next Xid this set has not been given: registered for Xid events on its GPU before it
 * happened, and happened by now. Earliest first. -1: none. */
static int next_xid(nvmlEventSet_t set, unsigned int *gpu, unsigned long long *code) {
    double origin = start_epoch >= 0 ? start_epoch : init_epoch, now = wall_now(), best = 0;
    int found = -1;
    unsigned int count = device_count();
    for (int i = 0; i < n_entries; i++) {
        unsigned int index;
        int consumed = 0;
        if (set->delivered[i] || sscanf(entries[i].key, "gpu.%u.xid_event%n", &index,
                                        &consumed) != 1 || entries[i].key[consumed] != '\0')
            continue;
        if (index >= count || !(set->mask[index] & EVENT_TYPE_XID)) continue;
        double at = entries[i].timed ? origin + entries[i].after : scenario_mtime;
        if (at > now || at < set->registered[index]) continue;
        if (found < 0 || at < best) {
            found = i;
            best = at;
            *gpu = index;
        }
    }
    if (found >= 0) *code = strtoull(entries[found].value, NULL, 0);
    return found;
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms) {
    ENTER(NULL);
    NEED(data && valid_set(set));
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        for (unsigned int i = 0; i < device_count(); i++)
            if (set->mask[i] && gpu_lost(i)) return NVML_ERROR_GPU_IS_LOST;
        unsigned int gpu = 0;
        unsigned long long code = 0;
        int entry = next_xid(set, &gpu, &code);
        if (entry >= 0) {
            set->delivered[entry] = 1;
            data->device = &devices[gpu];
            data->eventType = EVENT_TYPE_XID;
            data->eventData = code;
            data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFFu;
            return NVML_SUCCESS;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        double waited = (double)(now.tv_sec - start.tv_sec) * 1e3 +
                        (now.tv_nsec - start.tv_nsec) / 1e6;
        if (waited >= timeoutms) return NVML_ERROR_TIMEOUT;
        double left = timeoutms - waited;
        struct timespec nap = {0, (long)((left < 10 ? left : 10) * 1e6)};
        nanosleep(&nap, NULL);
    }
}
