/*
 * sbx create: a sandbox that outlives sbx, recorded in the state store.
 */
#include <stdlib.h>
#include <time.h>

#include "cli.h"

static void usage(FILE *out)
{
    fprintf(out,
"Usage: sbx create [OPTION]...\n"
"\n"
"Create a sandbox that outlives sbx, print its id (alone on one line) and\n"
"leave it running, for `sbx exec`, `sbx cp`, `sbx ls`, `sbx inspect` and\n"
"`sbx rm`. Wherever those take an ID, the sandbox's --name or any unique\n"
"prefix of its id works too, as in docker. The id maps to the sandbox's\n"
"session state (no environment value, no credential), recorded in\n"
"%s\n"
"(refused unless it, its records and its parents are the user's, or root's\n"
"for parents, and not writable by group or others).\n"
"\n"
"  -b, --backend=BACKEND   backend to use (default: $SBX_BACKEND, else local)\n"
"  -e, --env=KEY=VALUE     set an environment variable for every command of\n"
"                          the sandbox (repeatable; VALUE is taken literally);\n"
"                          -e KEY alone passes sbx's own KEY, as docker does\n"
"                          (nothing when sbx has no KEY)\n"
"  -w, --workdir=DIR       directory commands start in, inside the sandbox,\n"
"                          made when missing (on local: the host directory\n"
"                          used as the sandbox root, never deleted)\n"
"      --timeout=SECONDS   sandbox lifetime and default command timeout\n"
"                          (default %g)\n"
"      --name=NAME         a name usable wherever the id is ([A-Za-z0-9_.-],\n"
"                          starting with a letter or digit; unique)\n"
"  -u, --user=USER         the sandbox's default user (a name or uid in the\n"
"                          sandbox): commands and file copies without a user\n"
"                          of their own act as it (docker: the container's\n"
"                          user; bubblewrap: its uid inside; e2b: envd's user;\n"
"                          elsewhere an error)\n"
CLI_CREATION_OPTIONS_HELP
"\n"
"Exit status: 0 when the sandbox was created and recorded; 125 otherwise\n"
"(nothing is left running then).\n",
            "${SBX_STATE_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/sbx}/sandboxes",
            SBX_DEFAULT_TIMEOUT_SECS);
}

/* ISO 8601 UTC of @t (UNIX seconds) into @out. */
static void iso8601(time_t t, char out[32])
{
    struct tm tm;

    gmtime_r(&t, &tm);
    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/*
 * The creation options that were set, for `sbx inspect`: each set field by
 * the library's name with its value, except those whose values may be
 * secret or large (environment, backend options, files, workspace, git
 * repository), which are recorded as true. New object.
 */
static json_object *options_set(const sbx_options *o)
{
    json_object *doc = json_object_new_object();
    const char *s;

#define SET(field) sbx_options_is_set(o, SBX_OPTION_##field)
#define ADD_STRING(field, key, getter) \
    if (SET(field) && (s = getter(o)) != NULL) \
        json_object_object_add(doc, key, json_object_new_string(s))
#define ADD_TRUE(field, key) \
    if (SET(field)) \
        json_object_object_add(doc, key, json_object_new_boolean(1))
    ADD_STRING(WORKDIR, "workdir", sbx_options_get0_workdir);
    if (SET(TIMEOUT_SECS))
        json_object_object_add(doc, "timeout_secs",
                               json_object_new_double(sbx_options_get_timeout_secs(o)));
    if (SET(CPU))
        json_object_object_add(doc, "cpu", json_object_new_double(sbx_options_get_cpu(o)));
    if (SET(MEMORY_MB))
        json_object_object_add(doc, "memory_mb",
                               json_object_new_int64(sbx_options_get_memory_mb(o)));
    if (SET(DISK_MB))
        json_object_object_add(doc, "disk_mb",
                               json_object_new_int64(sbx_options_get_disk_mb(o)));
    ADD_STRING(IMAGE, "image", sbx_options_get0_image);
    ADD_STRING(TEMPLATE, "template", sbx_options_get0_template);
    ADD_STRING(SNAPSHOT_ID, "snapshot_id", sbx_options_get0_snapshot_id);
    ADD_STRING(APP_NAME, "app_name", sbx_options_get0_app_name);
    ADD_STRING(GPU, "gpu", sbx_options_get0_gpu);
    ADD_STRING(PRESET, "preset", sbx_options_get0_preset);
    ADD_STRING(USER, "user", sbx_options_get0_user);
    if (SET(ALLOW_INTERNET))
        json_object_object_add(doc, "allow_internet",
                               json_object_new_boolean(sbx_options_get_allow_internet(o)));
    ADD_TRUE(ENV_VARS, "env_vars");
    ADD_TRUE(GIT_REPO, "git_repo");
    ADD_TRUE(BACKEND_OPTIONS, "backend_options");
    ADD_TRUE(FILES, "files");
    ADD_TRUE(WORKSPACE, "workspace");
#undef SET
#undef ADD_STRING
#undef ADD_TRUE
    return doc;
}

/* What the record keeps besides the session state: expires, options and
 * name (new object; NULL when memory runs out). */
static json_object *record_meta(const sbx_options *options, const char *name,
                                const char *expires)
{
    json_object *meta = json_object_new_object();

    if (meta == NULL)
        return NULL;
    json_object_object_add(meta, "expires", json_object_new_string(expires));
    json_object_object_add(meta, "options", options_set(options));
    if (name != NULL)
        json_object_object_add(meta, "name", json_object_new_string(name));
    return meta;
}

/* Creates the sandbox @options describe on @backend, records it (with
 * @name, NULL for none), detaches it and prints its id; returns the exit
 * status. It outlives sbx, bounded by its lifetime, only once recorded:
 * made attached, it dies with sbx until then, so an sbx killed midway
 * (SIGKILL included) leaves no sandbox that no record names. */
static int create_recorded(const char *backend, const sbx_options *options, const char *name)
{
    /* A stop signal cancels the creation; the library undoes what it made
     * (a sandbox half made or made meanwhile is destroyed). */
    cli_call call = { .kind = CLI_CALL_CREATE, .what = "the creation", .backend = backend,
                      .options = options, .grace = CLI_SIGNAL_DRAIN_SECS };
    cli_outcome outcome;
    sbx_sandbox *sandbox;
    sbx_error *error = NULL;
    char *state, created[32], expires[32];
    time_t start = time(NULL);
    double lifetime;
    json_object *meta = NULL;
    int status;

    iso8601(start, created);
    status = cli_call_run(&call, &outcome);
    if (status != 0)
        return status;
    /* The lifetime runs from readiness: at the latest, now. */
    lifetime = sbx_options_get_timeout_secs(options);
    iso8601(time(NULL) + (time_t)lifetime + ((double)(time_t)lifetime < lifetime), expires);
    if (outcome.sandbox == NULL)
        return cli_outcome_fail(&outcome);
    sandbox = outcome.sandbox;
    outcome.sandbox = NULL;
    cli_outcome_clear(&outcome);
    status = CLI_EXIT_TOOL;
    state = sbx_sandbox_session_state(sandbox, &error);
    if (state == NULL) {
        cli_error(error);
        cli_msg("the sandbox cannot outlive sbx on backend %s; destroying it", backend);
        cli_sandbox_destroy(sandbox);
    } else if ((meta = record_meta(options, name, expires)) == NULL) {
        cli_out_of_memory();
        cli_sandbox_destroy(sandbox);
    } else if (cli_state_store(sbx_sandbox_get0_id(sandbox), created, state, meta) < 0) {
        cli_sandbox_destroy(sandbox);
    } else if (sbx_sandbox_detach(sandbox, &error) < 0) {
        /* Recorded but still attached: undone, record and sandbox. */
        cli_error(error);
        cli_state_forget(sbx_sandbox_get0_id(sandbox));
        cli_sandbox_destroy(sandbox);
    } else {
        printf("%s\n", sbx_sandbox_get0_id(sandbox));
        status = 0;
    }
    json_object_put(meta);
    free(state);
    sbx_sandbox_free(sandbox);
    return status;
}

static int create_main(int argc, char **argv)
{
    const char *backend = cli_default_backend();
    sbx_options *options = cli_options_new();
    char *dir = NULL;
    int status;

    if (options == NULL)
        return CLI_EXIT_TOOL;
    status = cli_parse_creation_options(&cli_command_create, argc, argv, options, &backend,
                                        NULL);
    if (status == CLI_GO_ON)
        status = cli_no_operands(&cli_command_create, argc, argv);
    /* The record must be possible before a sandbox is made for it. */
    if (status == CLI_GO_ON && cli_state_dir_open(1, &dir) < 0)
        status = CLI_EXIT_TOOL;
    /* A name taken is refused before anything is made. */
    if (status == CLI_GO_ON && cli_creation_name != NULL &&
        cli_name_check(cli_creation_name) < 0)
        status = CLI_EXIT_TOOL;
    if (status == CLI_GO_ON)
        status = create_recorded(backend, options, cli_creation_name);
    free(dir);
    sbx_options_free(options);
    return status;
}

const cli_command cli_command_create = {
    "create", "create [OPTION]...", "create a sandbox that outlives sbx and print its id",
    create_main, usage
};
