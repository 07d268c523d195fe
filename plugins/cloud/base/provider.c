/*
 * provider.c — what the hosted-provider plugins write alike (provider.h).
 */
#include "provider.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <pthread.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

/* ------------------------------------------------------------------------ */
/* The gone flag                                                             */
/* ------------------------------------------------------------------------ */

void cl_gone_init(cl_gone *g)
{
    pthread_mutex_init(&g->lock, NULL);
    g->gone = 0;
}

void cl_gone_destroy(cl_gone *g)
{
    pthread_mutex_destroy(&g->lock);
}

int cl_gone_get(cl_gone *g)
{
    pthread_mutex_lock(&g->lock);
    int v = g->gone;
    pthread_mutex_unlock(&g->lock);
    return v;
}

void cl_gone_set(cl_gone *g)
{
    pthread_mutex_lock(&g->lock);
    g->gone = 1;
    pthread_mutex_unlock(&g->lock);
}

sbx_error *cl_gone_error(sbx_error **error, const char *op, const char *provider,
                         const char *id)
{
    sbx_error *err = cl_fail(error, SBX_ERROR_NOT_FOUND, op,
                             "%s sandbox %s is gone (the provider no longer has it)", provider,
                             id);
    cl_context(err, "sandbox_id", id);
    cl_context(err, "reason", "gone");
    return err;
}

int cl_lifetime_check(double expires_at, double lifetime, const char *id, const char *op,
                      sbx_error **error)
{
    if (!(expires_at > 0) || cl_wallclock() < expires_at)
        return 0;
    char when[32];
    time_t t = (time_t)expires_at;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    sbx_error *err = cl_fail(error, SBX_ERROR_NOT_FOUND, op, "sandbox %s expired at %s "
                             "(lifetime %g s)", id, when, lifetime);
    cl_context(err, "sandbox_id", id);
    cl_context(err, "expires_at", when);
    return -1;
}

sbx_error *cl_gone_error_view(sbx_error **error, const char *op, const char *provider,
                              const char *id, json_object *view, const char *const *keys)
{
    sbx_error *err = cl_gone_error(error, op, provider, id);
    for (int i = 0; view && keys[i]; i++)
        cl_context(err, strcmp(keys[i], "status") == 0 ? "state" : keys[i],
                   cl_json_str(view, keys[i]));
    return err;
}

int cl_gone_check(cl_gone *g, const char *op, const char *provider, const char *id,
                  sbx_error **error)
{
    if (!cl_gone_get(g))
        return 0;
    cl_gone_error(error, op, provider, id);
    return -1;
}

sbx_error *cl_gone_mark(cl_gone *g, sbx_error **error, const char *op, const char *provider,
                        const char *id)
{
    cl_gone_set(g);
    return cl_gone_error(error, op, provider, id);
}

/* ------------------------------------------------------------------------ */
/* Waiting for a state                                                       */
/* ------------------------------------------------------------------------ */

int cl_wait_until(const sbx_call_ctx *ctx, double max_s, cl_wait_fn fn, void *ud,
                  const char *op, const char *what, sbx_error **error)
{
    cl_bound b = cl_bound_make(ctx, max_s);
    for (double pause = 0.05;; pause = pause < 0.5 ? pause * 2 : pause) {
        const char *state = NULL;
        int rc = fn(ud, &state, error);
        if (rc > 0)
            return 0;
        if (rc < 0)
            return -1;
        if (cl_bound_left(&b) == 0) {
            sbx_error *err = cl_fail(error, SBX_ERROR_TIMEOUT, op, "%s did not happen (it is %s)",
                                     what, state ? state : "unknown");
            if (state)
                cl_context(err, "state", state);
            return -1;
        }
        double left = cl_bound_left(&b);
        if (cl_sleep(pause < left ? pause : left, b.cancel_fd)) {
            cl_fail(error, SBX_ERROR_TIMEOUT, op, "cancelled while waiting: %s", what);
            return -1;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Session state                                                             */
/* ------------------------------------------------------------------------ */

char *cl_state_out(json_object *j, const char *op, sbx_error **error)
{
    const char *s = json_object_to_json_string_ext(j, JSON_C_TO_STRING_PLAIN
                                                      | JSON_C_TO_STRING_NOSLASHESCAPE);
    size_t n = s ? strlen(s) + 1 : 0;
    char *out = s ? cl_host->alloc(n) : NULL;
    if (out)
        memcpy(out, s, n);
    else
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    return out;
}


void *cl_client_new(const cl_client_spec *spec, const char *config_json, json_object **cfg,
                    sbx_error **error)
{
    const char *op = "client_new";
    if (cl_client_config(config_json, spec->provider, cfg, error) < 0)
        return NULL;
    cl_client *c = calloc(1, spec->size);
    if (!c || !(c->http = cl_http_new())) {
        free(c);
        json_object_put(*cfg);
        *cfg = NULL;
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return NULL;
    }
    c->spec = spec;
    if (spec->url_key) {
        const char *env = spec->url_env ? getenv(spec->url_env) : NULL;
        if (!spec->url_default && !cl_json_str(*cfg, spec->url_key) && !(env && *env)) {
            cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, op, "%s", spec->url_missing),
                       "option", spec->url_key);
            goto fail;
        }
        c->api = cl_base_url(*cfg, spec->url_key, spec->url_env, spec->url_default, error);
        if (!c->api)
            goto fail;
    }
    if (cl_http_configure(c->http, *cfg, spec->key_envs, spec->auth_header, spec->auth_prefix,
                          error) < 0)
        goto fail;
    if (spec->key_required && spec->key_envs && spec->key_envs[0]
        && !cl_http_has_auth(c->http)) {
        cl_buf m = { 0 };
        int bad = cl_buf_printf(&m, "%s backend: no credential (set %s", spec->provider,
                                spec->key_envs[0]) < 0;
        for (size_t i = 1; spec->key_envs[i] && !bad; i++)
            bad = cl_buf_printf(&m, " or %s", spec->key_envs[i]) < 0;
        bad = bad || cl_buf_printf(&m, "%s)", spec->key_else ? spec->key_else : "") < 0
              || cl_http_set_missing_credential(c->http, m.data) < 0;
        cl_buf_clear(&m);
        if (bad) {
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
            goto fail;
        }
    }
    if (spec->find
        && !(c->reaper = cl_reaper_new_op(spec->find, spec->del, (sbx_plugin_client *)c))) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto fail;
    }
    return c;
fail:
    json_object_put(*cfg);
    *cfg = NULL;
    c->spec = NULL;     /* nothing of the plugin's own to clear yet */
    cl_client_free_slot((sbx_plugin_client *)c);
    return NULL;
}

void cl_client_free_slot(sbx_plugin_client *client)
{
    cl_client *c = (cl_client *)client;
    if (!c)
        return;
    cl_reaper_free(c->reaper);
    if (c->spec && c->spec->clear)
        c->spec->clear(client);
    cl_http_free(c->http);
    free(c->api);
    free(c);
}

int cl_create_workdir(sbx_plugin_sandbox *sb, char **slot, cl_run_fn run, const sbx_call_ctx *ctx,
                      const char *provider, const char *workdir, const char *op,
                      sbx_error **error)
{
    if (!workdir || !*workdir)
        return 0;
    if (cl_make_workdir(sb, run, ctx, provider, workdir, op, error) < 0)
        return -1;
    if (cl_dup(slot, workdir) < 0) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    return 0;
}

int cl_token_ids_match(cl_token_ids *t, const char *item_token, const char *id)
{
    if (!item_token || strcmp(item_token, t->token) != 0)
        return 0;
    return cl_ids_add(&t->ids, id);
}

char *cl_list_command(const char *dir)
{
    char *q = cl_shell_quote_path(dir);
    char *cmd = q ? cl_printf("test -d %s || exit 3; find %s -mindepth 1 -maxdepth 1 "
                              "-printf '%%y %%s %%f\\n'", q, q) : NULL;
    free(q);
    return cmd;
}

int cl_list_answer(int code, char *out, const char *shown, sbx_plugin_file_fn fn, void *ud,
                   const char *op, sbx_error **error)
{
    if (code == 3) {
        cl_context(cl_fail(error, SBX_ERROR_NOT_FOUND, op, "no such directory in the "
                           "sandbox: %s", shown), "path", shown);
        return -1;
    }
    if (code != 0) {
        cl_context(cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op, "cannot list %s (find "
                           "exited %d)", shown, code), "path", shown);
        return -1;
    }
    for (char *line = out, *nl; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        char *sp = strchr(line, ' ');
        char *sp2 = sp ? strchr(sp + 1, ' ') : NULL;
        if (!sp2)
            continue;
        int is_dir = line[0] == 'd';
        sbx_plugin_file_info info = { sizeof(info), sp2 + 1, is_dir,
                                      is_dir ? -1 : strtoll(sp + 1, NULL, 10), 0 };
        if (fn(&info, ud) != 0)
            break;
    }
    return 0;
}

sbx_plugin_file_info cl_file_info_json(json_object *e, const char *dir_key, int dir,
                                       const char *perm_key)
{
    int64_t size = -1;
    cl_json_int(e, "size", &size);
    int is_dir = dir || (dir_key && cl_json_bool(e, dir_key));
    const char *perm = perm_key ? cl_json_str(e, perm_key) : NULL;
    return (sbx_plugin_file_info){ sizeof(sbx_plugin_file_info), cl_json_str(e, "name"), is_dir,
                                   is_dir ? -1 : size,
                                   perm ? (uint32_t)strtoul(perm, NULL, 8) & 07777 : 0 };
}

int cl_file_infos_json(json_object *arr, const char *dir_key, int dir, const char *perm_key,
                       sbx_plugin_file_fn fn, void *ud)
{
    size_t n = json_object_is_type(arr, json_type_array) ? json_object_array_length(arr) : 0;
    for (size_t i = 0; i < n; i++) {
        sbx_plugin_file_info info = cl_file_info_json(json_object_array_get_idx(arr, i), dir_key,
                                                      dir, perm_key);
        if (info.name && fn(&info, ud) != 0)
            return 1;
    }
    return 0;
}

int cl_list_files_run(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *dir,
                      const char *path, cl_run_out_fn run, sbx_plugin_file_fn fn, void *ud,
                      sbx_error **error)
{
    const char *op = "list_files";
    char *p = cl_path_in(dir, path), *cmd = p ? cl_list_command(p) : NULL;
    char *out = NULL;
    int code = 0, rc = -1;
    if (!cmd)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    else if (run(sb, ctx, cmd, &code, &out, op, error) == 0)
        rc = cl_list_answer(code, out, path, fn, ud, op, error);
    free(out);
    free(cmd);
    free(p);
    return rc;
}

int cl_read_file_by(sbx_plugin_sandbox *sb, cl_http *h, const sbx_call_ctx *ctx, const char *dir,
                    const char *path, cl_download_fn download, int fd, sbx_error **error)
{
    const char *op = "read_file";
    char *p = cl_path_in(dir, path);
    cl_resp r = { 0 };
    int rc = p ? download(sb, ctx, p, cl_fd_sink, &fd, &r, op, error) : -1;
    if (!p)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    if (rc < 0 && r.status)
        cl_file_fail((cl_sandbox *)(void *)sb, h, &r, 0, op, path, "file", error);
    free(p);
    cl_resp_clear(&r);
    return rc;
}

json_object *cl_state_new(cl_sandbox *s, const char *provider, int version,
                          const char *id_key, sbx_error **error)
{
    if (cl_gone_check(&s->gone, "session_state", provider, s->id, error) < 0)
        return NULL;
    json_object *j = json_object_new_object();
    json_object_object_add(j, "version", json_object_new_int(version));
    json_object_object_add(j, id_key, json_object_new_string(s->id));
    if (s->workdir)
        json_object_object_add(j, "workdir", json_object_new_string(s->workdir));
    return j;
}

char *cl_state_end(json_object *j, sbx_error **error)
{
    if (!j)
        return NULL;
    char *out = cl_state_out(j, "session_state", error);
    json_object_put(j);
    return out;
}

json_object *cl_state_in(const char *state_json, int version, const char *id_key,
                         const char *provider, const char *op, const char **id,
                         sbx_error **error)
{
    json_object *data = state_json ? json_tokener_parse(state_json) : NULL;
    const char *v = cl_json_str(data, id_key);
    int64_t ver = 0;
    if (!v || !*v || cl_json_int(data, "version", &ver) != 1 || ver != version) {
        cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                "%s session state: needs \"version\": %d and a \"%s\"", provider, version,
                id_key);
        json_object_put(data);
        return NULL;
    }
    *id = v;
    return data;
}

/* @j's state member as @rs names it (NULL: none, or not looked at). */
static const char *state_of(const cl_resume_spec *rs, json_object *j)
{
    return j && rs->state_key ? cl_json_str(j, rs->state_key) : NULL;
}

/* The gone error of sandbox @id as @rs gives it: @rs->gone with the
 * provider's view @j (NULL after a 404), else cl_gone_error() with context
 * @rs->state_key=STATE when @j holds one. */
static void spec_gone_error(const cl_resume_spec *rs, sbx_error **error, const char *op,
                            const char *id, json_object *j)
{
    const char *s = state_of(rs, j);
    if (rs->gone)
        rs->gone(error, op, id, j);
    else if (s)
        cl_context(cl_gone_error(error, op, rs->provider, id), rs->state_key, s);
    else
        cl_gone_error(error, op, rs->provider, id);
}

json_object *cl_resume_get(sbx_plugin_client *client, const sbx_call_ctx *ctx,
                           const char *state_json, const cl_resume_spec *rs, json_object **state,
                           const char **id, sbx_error **error)
{
    const char *op = "resume";
    *state = cl_state_in(state_json, rs->version, rs->id_key, rs->provider, op, id, error);
    if (!*state)
        return NULL;
    long st = 0;
    json_object *j = rs->get(client, ctx, *id, &st, op, error);
    if (j && !cl_str_in(state_of(rs, j), rs->dead))
        return j;
    if (j || st == 404)
        spec_gone_error(rs, error, op, *id, j);
    json_object_put(j);
    json_object_put(*state);
    *state = NULL;
    return NULL;
}

/* The sandbox struct of a resume: @id and the state's workdir when it is
 * one; NULL with resource_exhausted. */
static cl_sandbox *resume_sandbox(sbx_plugin_client *client, json_object *state, const char *id,
                                  size_t size, sbx_error **error)
{
    const char *wd = cl_json_str(state, "workdir");
    cl_sandbox *s = cl_sandbox_new(size, client, id, cl_workdir_ok(wd) ? wd : NULL);
    if (!s)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, "resume", "out of memory");
    return s;
}

void *cl_resume_new(sbx_plugin_client *client, const sbx_call_ctx *ctx, const char *state_json,
                    const cl_resume_spec *rs, size_t size, json_object **view,
                    json_object **state, sbx_error **error)
{
    const char *id = NULL;
    *view = cl_resume_get(client, ctx, state_json, rs, state, &id, error);
    if (!*view)
        return NULL;
    cl_sandbox *s = resume_sandbox(client, *state, id, size, error);
    if (!s) {
        json_object_put(*view);
        json_object_put(*state);
        *view = *state = NULL;
    }
    return s;
}

void *cl_resume_state(sbx_plugin_client *client, const char *state_json, const char *provider,
                      int version, const char *id_key, size_t size, json_object **state,
                      sbx_error **error)
{
    const char *id = NULL;
    *state = cl_state_in(state_json, version, id_key, provider, "resume", &id, error);
    cl_sandbox *s = *state ? resume_sandbox(client, *state, id, size, error) : NULL;
    if (!s) {
        json_object_put(*state);
        *state = NULL;
    }
    return s;
}

int cl_resume_end(int rc, void *sb, sbx_plugin_sandbox **sandbox, json_object *view,
                  json_object *state, void (*free_fn)(sbx_plugin_sandbox *sb))
{
    json_object_put(view);
    json_object_put(state);
    if (rc == 0) {
        *sandbox = sb;
        return 0;
    }
    if (free_fn)
        free_fn(sb);
    else
        cl_sandbox_free(sb);
    return -1;
}

int cl_sandbox_ended(sbx_plugin_client *client, const sbx_call_ctx *ctx, const cl_resume_spec *rs,
                     const char *id, const char *op, json_object **view)
{
    long st = 0;
    json_object *j = rs->get(client, ctx, id, &st, op, NULL);
    int ended = st == 404 || (j && cl_str_in(state_of(rs, j), rs->dead));
    if (view)
        *view = j;
    else
        json_object_put(j);
    return ended;
}

int cl_stop_answer(sbx_plugin_client *client, const sbx_call_ctx *ctx, const cl_resume_spec *rs,
                   const char *id, int rc, cl_resp *r, long gone_status, const char *op,
                   const char *what, sbx_error **error)
{
    if (rc == 0 && r->status / 100 != 2 && r->status != 404
        && !(gone_status && r->status == gone_status)
        && !cl_sandbox_ended(client, ctx, rs, id, op, NULL)) {
        cl_fail_status(((cl_client *)client)->http, error, CL_CODE_BY_STATUS, r, op, what);
        rc = -1;
    }
    cl_resp_clear(r);
    return rc;
}

int cl_sandbox_confirm_gone(cl_sandbox *s, sbx_plugin_client *client, const sbx_call_ctx *ctx,
                            const cl_resume_spec *rs, const char *op, sbx_error **error)
{
    json_object *j = NULL;
    int ended = cl_sandbox_ended(client, ctx, rs, s->id, op, &j);
    if (ended) {
        cl_gone_set(&s->gone);
        spec_gone_error(rs, error, op, s->id, j);
    }
    json_object_put(j);
    return ended;
}

typedef struct cl_waking {
    cl_sandbox *s;
    const sbx_call_ctx *ctx;
    const cl_wake_spec *ws;
    const char *op;
    int woken;
    char state[32];
} cl_waking;

/* One look for cl_wait_until(): 1 in the ready state; -1 when gone, failed
 * or not woken; 0 otherwise (a sleeping sandbox woken once). */
static int wake_look(void *ud, const char **state, sbx_error **error)
{
    cl_waking *w = ud;
    const cl_wake_spec *ws = w->ws;
    const cl_resume_spec *rs = ws->rs;
    long st = 0;
    json_object *j = rs->get(w->s->c, w->ctx, w->s->id, &st, w->op, error);
    if (!j) {
        if (st == 404) {
            cl_gone_set(&w->s->gone);
            spec_gone_error(rs, error, w->op, w->s->id, NULL);
        }
        return -1;
    }
    snprintf(w->state, sizeof w->state, "%s", cl_json_str_or(j, rs->state_key, ws->none));
    *state = w->state;
    int rc = 0;
    if (strcmp(w->state, ws->ready) == 0) {
        rc = 1;
    } else if (ws->check && ws->check(w->s, j, w->state, w->op, error) < 0) {
        rc = -1;
    } else if (cl_str_in(w->state, rs->dead)) {
        cl_gone_set(&w->s->gone);
        spec_gone_error(rs, error, w->op, w->s->id, j);
        rc = -1;
    } else if (cl_str_in(w->state, ws->asleep) && !w->woken) {
        w->woken = 1;
        rc = ws->wake(w->s, w->ctx, w->state, w->op, error) < 0 ? -1 : 0;
    }
    json_object_put(j);
    return rc;
}

int cl_sandbox_wake(cl_sandbox *s, const sbx_call_ctx *ctx, const cl_wake_spec *ws,
                    const char *op, sbx_error **error)
{
    cl_waking w = { s, ctx, ws, op, 0, "" };
    char what[160];
    snprintf(what, sizeof what, "%s sandbox %s reaching %s %s", ws->rs->provider, s->id,
             ws->noun, ws->ready);
    return cl_wait_until(ctx, ws->max_s, wake_look, &w, op, what, error);
}

/* ------------------------------------------------------------------------ */
/* The missing working directory                                             */
/* ------------------------------------------------------------------------ */

char *cl_script_cwd(const char *script)
{
    if (!script || strncmp(script, "cd -- ", 6) != 0)
        return NULL;
    const char *q = script + 6;
    const char *end = strstr(q, " || exit");
    return end ? strndup(q, (size_t)(end - q)) : NULL;
}

sbx_error *cl_cwd_missing_error(sbx_error **error, const char *op, const char *quoted_cwd)
{
    sbx_error *err = cl_fail(error, SBX_ERROR_NOT_FOUND, op,
                             "the working directory %s does not exist in the sandbox",
                             quoted_cwd);
    cl_context(err, "path", quoted_cwd);
    return err;
}

/* ------------------------------------------------------------------------ */
/* Descriptors                                                               */
/* ------------------------------------------------------------------------ */

int cl_fd_sink(void *ud, const char *p, size_t n)
{
    int fd = *(int *)ud;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

ssize_t cl_fd_source(void *ud, char *buf, size_t cap)
{
    int fd = *(int *)ud;
    for (;;) {
        ssize_t r = read(fd, buf, cap);
        if (r < 0 && errno == EINTR)
            continue;
        return r;
    }
}

/* ------------------------------------------------------------------------ */
/* Every process of one command                                              */
/* ------------------------------------------------------------------------ */

char *cl_mark_kill_command_var(const char *var, const char *tag, int sig)
{
    static const char ok[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_";
    if (!var || !*var || strspn(var, ok) != strlen(var) || !tag || !*tag
        || strspn(tag, ok) != strlen(tag))
        return NULL;
    char *s = NULL;
    if (asprintf(&s, "for d in /proc/[0-9]*; do tr '\\0' '\\n' < $d/environ 2>/dev/null "
                     "| grep -qx '%s=%s' && kill -%d ${d#/proc/} 2>/dev/null; "
                     "done; exit 0", var, tag, sig) < 0)
        return NULL;
    return s;
}

char *cl_mark_kill_command(const char *tag, int sig)
{
    return cl_mark_kill_command_var(CL_EXEC_MARK, tag, sig);
}

char *cl_mark_resize_command(const char *tag, unsigned rows, unsigned cols)
{
    static const char ok[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_";
    if (!tag || !*tag || strspn(tag, ok) != strlen(tag) || rows == 0 || cols == 0
        || rows > 65535 || cols > 65535)
        return NULL;
    /* /proc/N/fd/0 opens the command's own terminal whatever the path of
     * its device is in this mount namespace. The size is set with one
     * TIOCSWINSZ (python3's termios), so the command never sees half of
     * it; without python3, stty (rows, then cols: two ioctls). Up to 50
     * looks, 0.1 s apart, while the command may still be starting. */
    char *s = NULL;
    if (asprintf(&s, "sbx_ws() { python3 -c 'import fcntl, os, struct, sys, termios\n"
                     "fd = os.open(sys.argv[1], os.O_RDONLY | os.O_NOCTTY)\n"
                     "fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack(\"HHHH\", %u, %u, 0, 0))' "
                     "\"$1\" 2>/dev/null || stty -F \"$1\" rows %u cols %u 2>/dev/null; }; "
                     "i=0; while [ $i -lt 50 ]; do for d in /proc/[0-9]*; do "
                     "tr '\\0' '\\n' 2>/dev/null <$d/environ | grep -qx '%s=%s' || continue; "
                     "[ -t 0 ] 2>/dev/null <$d/fd/0 || continue; "
                     "sbx_ws $d/fd/0 && exit 0; done; "
                     "i=$((i+1)); sleep 0.1; done; exit %d", rows, cols, rows, cols,
                 CL_EXEC_MARK, tag, CL_RESIZE_NONE_EXIT) < 0)
        return NULL;
    return s;
}

/* ------------------------------------------------------------------------ */
/* The create's environment as a file                                        */
/* ------------------------------------------------------------------------ */

static int cl_is_name(const char *k, size_t n)
{
    if (n == 0 || (k[0] >= '0' && k[0] <= '9'))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((k[i] >= 'a' && k[i] <= 'z') || (k[i] >= 'A' && k[i] <= 'Z')
              || (k[i] >= '0' && k[i] <= '9') || k[i] == '_'))
            return 0;
    return 1;
}

int cl_env_names_check(const char *const *env, const char *op, sbx_error **error)
{
    for (size_t i = 0; env && env[i]; i++) {
        const char *e = env[i], *eq = strchr(e, '=');
        size_t kn = eq ? (size_t)(eq - e) : strlen(e);
        if (!eq || !cl_is_name(e, kn)) {
            char key[128];
            snprintf(key, sizeof key, "%.*s", (int)kn, e);
            sbx_error *err = cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                                     "env key \"%s\" is not a shell name (KEY=VALUE, KEY of "
                                     "letters, digits and _, not starting with a digit)", key);
            cl_context(err, "env_name", key);
            return -1;
        }
    }
    return 0;
}

char *cl_env_file(const char *const *env)
{
    cl_buf b = { 0 };
    int bad = 0;
    for (size_t i = 0; env && env[i] && !bad; i++) {
        const char *eq = strchr(env[i], '=');
        size_t kn = eq ? (size_t)(eq - env[i]) : 0;
        if (!eq || !cl_is_name(env[i], kn)) {
            bad = 1;
            break;
        }
        char *q = cl_shell_quote(eq + 1);
        char *line = NULL;
        if (!q || asprintf(&line, "case :$" CL_CALL_KEYS ": in *:%.*s:*) ;; *) export %.*s=%s "
                                  ";; esac\n", (int)kn, env[i], (int)kn, env[i], q) < 0)
            line = NULL;
        bad = !line || cl_buf_append(&b, line, strlen(line)) < 0;
        free(line);
        free(q);
    }
    return cl_buf_take(&b, bad || cl_buf_append(&b, "", 1) < 0);
}

int cl_buf_env_exports(cl_buf *b, const char *const *env)
{
    for (size_t i = 0; env && env[i]; i++) {
        const char *eq = strchr(env[i], '=');
        if (!eq)
            continue;
        char *q = cl_shell_quote(eq + 1);
        int bad = !q || cl_buf_printf(b, "export %.*s=%s\n", (int)(eq - env[i]), env[i], q) < 0;
        free(q);
        if (bad)
            return -1;
    }
    return 0;
}

char *cl_env_exports(const char *const *env)
{
    cl_buf b = { 0 };
    return cl_buf_take(&b, cl_buf_append(&b, "", 0) < 0 || cl_buf_env_exports(&b, env) < 0);
}

char *cl_env_file_source(const char *path)
{
    char *q = cl_shell_quote(path), *s = NULL;
    if (!q || asprintf(&s, "[ -r %s ] && . %s; unset " CL_CALL_KEYS "\n", q, q) < 0)
        s = NULL;
    free(q);
    return s;
}

char *cl_call_keys(const char *const *env)
{
    cl_buf b = { 0 };
    int bad = 0;
    for (size_t i = 0; env && env[i] && !bad; i++) {
        const char *eq = strchr(env[i], '=');
        size_t kn = eq ? (size_t)(eq - env[i]) : strlen(env[i]);
        bad = (i && cl_buf_append(&b, ":", 1) < 0) || cl_buf_append(&b, env[i], kn) < 0;
    }
    return cl_buf_take(&b, bad || cl_buf_append(&b, "", 1) < 0);
}

/* ------------------------------------------------------------------------ */
/* The sandbox head, and what creates and commands write alike               */
/* ------------------------------------------------------------------------ */

char *cl_printf(const char *fmt, ...)
{
    va_list ap;
    char *s = NULL;
    va_start(ap, fmt);
    if (vasprintf(&s, fmt, ap) < 0)
        s = NULL;
    va_end(ap);
    return s;
}

const char *cl_json_str_or(json_object *o, const char *key, const char *dflt)
{
    const char *s = cl_json_str(o, key);
    return s ? s : dflt;
}

int cl_str_in(const char *s, const char *const *list)
{
    for (size_t i = 0; s && list && list[i]; i++)
        if (strcmp(s, list[i]) == 0)
            return 1;
    return 0;
}

char **cl_strv_dup(const char *const *v)
{
    size_t n = 0;
    while (v && v[n])
        n++;
    char **o = calloc(n + 1, sizeof(char *));
    for (size_t i = 0; o && i < n; i++)
        if (!(o[i] = strdup(v[i]))) {
            cl_strv_free(o);
            return NULL;
        }
    return o;
}

void cl_random_hex(char *out, size_t nbytes)
{
    static const char hexd[] = "0123456789abcdef";
    unsigned char r[32];
    if (nbytes > sizeof(r))
        nbytes = sizeof(r);
    if (getrandom(r, nbytes, 0) != (ssize_t)nbytes)
        for (size_t i = 0; i < nbytes; i++)
            r[i] = (unsigned char)(rand() & 0xff);
    for (size_t i = 0; i < nbytes; i++) {
        out[2 * i] = hexd[r[i] >> 4];
        out[2 * i + 1] = hexd[r[i] & 15];
    }
    out[2 * nbytes] = '\0';
}

json_object *cl_env_object(const char *const *env)
{
    json_object *e = json_object_new_object();
    for (size_t i = 0; e && env && env[i]; i++) {
        const char *eq = strchr(env[i], '=');
        char *k = eq ? strndup(env[i], (size_t)(eq - env[i])) : NULL;
        if (k)
            json_object_object_add(e, k, json_object_new_string(eq + 1));
        free(k);
    }
    return e;
}

int cl_request_json(cl_http *h, const sbx_call_ctx *ctx, const char *method, const char *url,
                    json_object *body, cl_idempotency idem, cl_resp *resp, const char *op,
                    const char *what, sbx_error **error)
{
    const char *b = body ? json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN) : NULL;
    cl_req rq = { .method = method, .url = url, .body = b, .body_len = b ? strlen(b) : 0,
                  .idempotent = idem, .what = what };
    return cl_request(h, ctx, &rq, resp, op, error);
}

int cl_workdir_ok(const char *workdir)
{
    if (!workdir || workdir[0] != '/')
        return 0;
    for (const char *p = workdir; (p = strstr(p, "..")) != NULL; p += 2)
        if (p[-1] == '/' && (p[2] == '/' || p[2] == '\0'))
            return 0;
    return 1;
}

int cl_workdir_check(const char *provider, const char *workdir, sbx_error **error)
{
    if (!workdir || !*workdir || cl_workdir_ok(workdir))
        return 0;
    cl_context(cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, "create",
                       workdir[0] == '/' ? "%s backend: workdir %s has a \"..\" component"
                                         : "%s backend: workdir %s is not an absolute path in "
                                           "the sandbox", provider, workdir), "path", workdir);
    return -1;
}

char *cl_trim_slash(const char *s)
{
    char *o = strdup(s);
    size_t n = o ? strlen(o) : 0;
    while (n && o[n - 1] == '/')
        o[--n] = '\0';
    return o;
}

char *cl_path_in(const char *workdir, const char *path)
{
    if (path[0] == '/' || !workdir)
        return strdup(path);
    size_t n = strlen(workdir);
    return cl_printf("%s%s%s", workdir, n && workdir[n - 1] == '/' ? "" : "/", path);
}

char *cl_path_query(const char *prefix, const char *workdir, const char *path)
{
    char *abs = cl_path_in(workdir, path);
    char *e = abs ? cl_url_escape(abs) : NULL;
    char *s = e ? cl_printf("%s%s", prefix, e) : NULL;
    free(e);
    free(abs);
    return s;
}

const char *cl_stat_name(const char *name)
{
    static __thread char buf[4096];
    snprintf(buf, sizeof buf, "%s", name ? name : "");
    return buf;
}

int cl_sandbox_init(cl_sandbox *s, const char *id)
{
    if (!(s->id = strdup(id)))
        return -1;
    cl_gone_init(&s->gone);
    s->ports = NULL;
    s->n_ports = 0;
    s->c = NULL;
    s->workdir = NULL;
    s->plane = NULL;
    return 0;
}

void cl_sandbox_clear(cl_sandbox *s)
{
    cl_gone_destroy(&s->gone);
    free(s->id);
    s->id = NULL;
    free(s->ports);
    s->ports = NULL;
    s->n_ports = 0;
    free(s->workdir);
    s->workdir = NULL;
    free(s->plane);
    s->plane = NULL;
}

int cl_sandbox_set_plane(cl_sandbox *s, const char *url)
{
    char *p = url ? cl_trim_slash(url) : NULL;
    if (!p)
        return -1;
    free(s->plane);
    s->plane = p;
    return 0;
}

sbx_error *cl_create_unanswered(cl_reaper *reaper, const sbx_call_ctx *ctx, const char *token,
                                const char *op, sbx_error **error)
{
    cl_last_error l = *cl_last();
    /* The call's deadline cancelled it: a timeout. */
    if (l.code == SBX_ERROR_CANCELLED && ctx && ctx->deadline > 0
        && cl_now() >= ctx->deadline - 0.05)
        l.code = SBX_ERROR_TIMEOUT;
    sbx_error *err = cl_fail(error, l.code, op, "%s", l.msg);
    if (l.unknown) {
        cl_outcome_unknown(err);
        if (token)
            cl_reap_lost(reaper, token);
    }
    return err;
}

/* The string at the dotted path @key of @j ("meta.nextCursor"), or NULL. */
static const char *json_dotted_str(json_object *j, const char *key)
{
    const char *dot;
    while (j && key && (dot = strchr(key, '.')) != NULL) {
        char part[64];
        snprintf(part, sizeof part, "%.*s", (int)(dot - key), key);
        j = cl_json_path(j, part, NULL);
        key = dot + 1;
    }
    return cl_json_str(j, key);
}

sbx_error_code cl_create_refused_code(long status)
{
    return status / 100 == 4 && status != 401 && status != 403 && status != 408
                   && status != 429
               ? SBX_ERROR_CONFIGURATION
               : CL_CODE_BY_STATUS;
}

json_object *cl_create_post(cl_http *h, cl_reaper *reaper, const sbx_call_ctx *ctx,
                            const char *url, json_object *body, const char *id_key,
                            const char *id_noun, const char *what, const char **id,
                            sbx_error **error)
{
    const char *op = "create";
    const char *token = ctx ? ctx->create_token : NULL;
    cl_resp r = { 0 };
    json_object *j = NULL;
    *id = NULL;
    if (!url) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    } else if (cl_request_json(h, ctx, "POST", url, body, CL_UNSAFE, &r, op, what, NULL) < 0) {
        /* Sent and not answered: the provider may finish it (CASE-20). */
        cl_create_unanswered(reaper, ctx, token, op, error);
    } else if (r.status / 100 != 2) {
        if (r.maybe_acted && token)
            cl_reap_lost(reaper, token);
        cl_fail_status(h, error, cl_create_refused_code(r.status), &r, op, what);
    } else {
        j = cl_resp_json(&r, op, what, error);
        if (!(*id = j ? json_dotted_str(j, id_key) : NULL)) {
            if (j)
                cl_fail(error, SBX_ERROR_CREATION_FAILED, op, "%s create answered without %s",
                        cl_backend, id_noun);
            if (token)
                cl_reap_now(reaper, NULL, token, 5.0);
            json_object_put(j);
            j = NULL;
        }
    }
    cl_resp_clear(&r);
    return j;
}

void *cl_sandbox_alloc(size_t size, const char *id)
{
    cl_sandbox *s = calloc(1, size < sizeof(*s) ? sizeof(*s) : size);
    if (s && cl_sandbox_init(s, id) < 0) {
        free(s);
        return NULL;
    }
    return s;
}

void *cl_sandbox_new(size_t size, struct sbx_plugin_client *c, const char *id,
                     const char *workdir)
{
    cl_sandbox *s = cl_sandbox_alloc(size, id);
    if (!s)
        return NULL;
    s->c = c;
    if (cl_dup(&s->workdir, workdir && *workdir ? workdir : NULL) < 0) {
        cl_sandbox_free(s);
        return NULL;
    }
    return s;
}

void *cl_sandbox_new_at(size_t size, struct sbx_plugin_client *c, const char *id,
                        const char *workdir, const char *plane)
{
    cl_sandbox *s = plane ? cl_sandbox_new(size, c, id, workdir) : NULL;
    if (s && cl_sandbox_set_plane(s, plane) < 0) {
        cl_sandbox_free(s);
        return NULL;
    }
    return s;
}

void cl_sandbox_free(void *sb)
{
    if (!sb)
        return;
    cl_sandbox_clear(sb);
    free(sb);
}

void cl_sandbox_free_slot(sbx_plugin_sandbox *sb)
{
    cl_sandbox_free(sb);
}

int cl_dup(char **dst, const char *src)
{
    *dst = src ? strdup(src) : NULL;
    return src && !*dst ? -1 : 0;
}

size_t cl_request_ports(const sbx_plugin_create_request *rq, const uint16_t **ports)
{
    *ports = NULL;
    if (!rq || rq->struct_size < offsetof(sbx_plugin_create_request, n_ports)
                                     + sizeof(rq->n_ports) || !rq->ports)
        return 0;
    *ports = rq->ports;
    return rq->n_ports;
}

int cl_ports_add(cl_sandbox *s, unsigned port)
{
    int rc = 0;
    pthread_mutex_lock(&s->gone.lock);
    size_t i = 0;
    while (i < s->n_ports && s->ports[i] < port)
        i++;
    if (i == s->n_ports || s->ports[i] != port) {
        uint16_t *p = realloc(s->ports, (s->n_ports + 1) * sizeof(*p));
        if (p) {
            memmove(p + i + 1, p + i, (s->n_ports - i) * sizeof(*p));
            p[i] = (uint16_t)port;
            s->ports = p;
            s->n_ports++;
        } else {
            rc = -1;
        }
    }
    pthread_mutex_unlock(&s->gone.lock);
    return rc;
}

void cl_ports_remove(cl_sandbox *s, unsigned port)
{
    pthread_mutex_lock(&s->gone.lock);
    for (size_t i = 0; i < s->n_ports; i++)
        if (s->ports[i] == port) {
            memmove(s->ports + i, s->ports + i + 1, (s->n_ports - i - 1) * sizeof(*s->ports));
            s->n_ports--;
            break;
        }
    pthread_mutex_unlock(&s->gone.lock);
}

int cl_ports_has(cl_sandbox *s, unsigned port)
{
    int has = 0;
    pthread_mutex_lock(&s->gone.lock);
    for (size_t i = 0; i < s->n_ports && !has; i++)
        has = s->ports[i] == port;
    pthread_mutex_unlock(&s->gone.lock);
    return has;
}

void cl_ports_to_state(cl_sandbox *s, json_object *j)
{
    pthread_mutex_lock(&s->gone.lock);
    if (s->n_ports) {
        json_object *a = json_object_new_array();
        for (size_t i = 0; i < s->n_ports; i++)
            json_object_array_add(a, json_object_new_int(s->ports[i]));
        json_object_object_add(j, "ports", a);
    }
    pthread_mutex_unlock(&s->gone.lock);
}

int cl_ports_from_state(cl_sandbox *s, json_object *data, const char *provider, const char *op,
                        sbx_error **error)
{
    json_object *a;
    if (!json_object_object_get_ex(data, "ports", &a))
        return 0;
    int ok = json_object_is_type(a, json_type_array);
    for (size_t i = 0; ok && i < json_object_array_length(a); i++) {
        json_object *e = json_object_array_get_idx(a, i);
        int64_t v = json_object_is_type(e, json_type_int) ? json_object_get_int64(e) : 0;
        ok = v >= 1 && v <= 65535;
        if (ok && cl_ports_add(s, (unsigned)v) < 0) {
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
            return -1;
        }
    }
    if (!ok) {
        sbx_error *err = cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                                 "%s session state: bad \"ports\" (an array of port "
                                 "numbers 1..65535)", provider);
        cl_context(err, "key", "ports");
        return -1;
    }
    return 0;
}

char *cl_ports_list(cl_sandbox *s, const char *op, sbx_error **error)
{
    pthread_mutex_lock(&s->gone.lock);
    char *out = cl_host->alloc(s->n_ports * 6 + 1);
    if (out) {
        size_t len = 0;
        out[0] = '\0';
        for (size_t i = 0; i < s->n_ports; i++)
            len += (size_t)sprintf(out + len, i ? " %u" : "%u", (unsigned)s->ports[i]);
    }
    pthread_mutex_unlock(&s->gone.lock);
    if (!out)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    return out;
}

sbx_error *cl_port_not_exposed(sbx_error **error, cl_sandbox *s, const char *provider,
                               const char *op, unsigned port)
{
    char num[16];
    snprintf(num, sizeof(num), "%u", port);
    sbx_error *err = cl_fail(error, SBX_ERROR_NOT_FOUND, op,
                             "%s sandbox %s: port %u is not exposed", provider, s->id, port);
    cl_context(err, "port", num);
    return err;
}

int cl_ports_from_request(cl_sandbox *s, const sbx_plugin_create_request *rq, const char *op,
                          sbx_error **error)
{
    const uint16_t *ports;
    size_t n = cl_request_ports(rq, &ports);
    for (size_t i = 0; i < n; i++)
        if (cl_ports_add(s, ports[i]) < 0) {
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
            return -1;
        }
    return 0;
}

int cl_expose_port(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, unsigned port,
                   sbx_error **error)
{
    cl_sandbox *s = (cl_sandbox *)sb;
    (void)ctx;
    if (cl_gone_check(&s->gone, "expose_port", cl_backend, s->id, error) < 0)
        return -1;
    if (cl_ports_add(s, port) < 0) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, "expose_port", "out of memory");
        return -1;
    }
    return 0;
}

int cl_unexpose_port(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, unsigned port,
                     sbx_error **error)
{
    cl_sandbox *s = (cl_sandbox *)sb;
    (void)ctx;
    if (cl_gone_check(&s->gone, "unexpose_port", cl_backend, s->id, error) < 0)
        return -1;
    cl_ports_remove(s, port);
    return 0;
}

char *cl_list_ports(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, sbx_error **error)
{
    cl_sandbox *s = (cl_sandbox *)sb;
    (void)ctx;
    if (cl_gone_check(&s->gone, "list_ports", cl_backend, s->id, error) < 0)
        return NULL;
    return cl_ports_list(s, "list_ports", error);
}

int cl_port_resolvable(cl_sandbox *s, unsigned port, sbx_error **error)
{
    if (cl_gone_check(&s->gone, "resolve_port", cl_backend, s->id, error) < 0)
        return -1;
    if (!cl_ports_has(s, port)) {
        cl_port_not_exposed(error, s, cl_backend, "resolve_port", port);
        return -1;
    }
    return 0;
}

char *cl_host_strdup(const char *str, const char *op, sbx_error **error)
{
    size_t n = str ? strlen(str) + 1 : 0;
    char *out = str ? cl_host->alloc(n) : NULL;
    if (out)
        memcpy(out, str, n);
    else
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    return out;
}

const char *cl_sandbox_id(sbx_plugin_sandbox *sb)
{
    return ((cl_sandbox *)(void *)sb)->id;
}

const char *cl_sandbox_root(sbx_plugin_sandbox *sb)
{
    (void)sb;
    return "";
}

int cl_sandbox_destroy(cl_sandbox *s, sbx_plugin_client *client, cl_delete_fn del,
                       const sbx_call_ctx *ctx, sbx_error **error)
{
    if (cl_gone_get(&s->gone))
        return 0;
    if (del(client, ctx, s->id, "destroy", error) < 0)
        return -1;
    cl_gone_set(&s->gone);
    return 0;
}

void *cl_create_undo(void *sb, sbx_plugin_client *client, cl_delete_fn del, const char *id,
                     int context, void (*free_fn)(sbx_plugin_sandbox *sb), const char *op,
                     sbx_error **error)
{
    if (!sb)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    if (context && error && *error)
        cl_context(*error, "sandbox_id", id);
    del(client, NULL, id, op, NULL);
    if (sb && free_fn)
        free_fn(sb);
    else
        cl_sandbox_free(sb);
    return NULL;
}

int cl_sandbox_answer(cl_sandbox *s, cl_http *h, const cl_resp *r, const char *provider,
                      const char *op, const char *what, sbx_error **error)
{
    if (r->status / 100 == 2)
        return 0;
    if (r->status == 404) {
        cl_gone_mark(&s->gone, error, op, provider, s->id);
    } else {
        cl_fail_status(h, error, CL_CODE_BY_STATUS, r, op, what);
    }
    return -1;
}

int cl_file_fail(cl_sandbox *s, cl_http *h, const cl_resp *r, int by_status, const char *op,
                 const char *path, const char *what, sbx_error **error)
{
    if (cl_gone_get(&s->gone) || (error && *error) || !r->status)
        return -1;
    sbx_error *err;
    if (r->status == 404)
        err = cl_fail(error, SBX_ERROR_NOT_FOUND, op, "no such %s in the sandbox: %s", what,
                      path);
    else if (!by_status || r->status == 400 || r->status == 403 || r->status == 422)
        err = cl_fail_status(h, error, SBX_ERROR_INVALID_ARGUMENT, r, op, what);
    else
        err = cl_fail_status(h, error, CL_CODE_BY_STATUS, r, op, what);
    cl_context(err, "path", path);
    return -1;
}

int cl_sandbox_call(cl_sandbox *s, cl_http *h, const sbx_call_ctx *ctx, const char *method,
                    const char *api, const char *collection, const char *suffix,
                    json_object *body, cl_idempotency idem, long also_ok, const char *op,
                    const char *what, sbx_error **error)
{
    if (cl_gone_check(&s->gone, op, cl_backend, s->id, error) < 0)
        return -1;
    cl_resp r = { 0 };
    int rc = cl_item_request(h, ctx, method, api, collection, s->id, suffix, body, idem, &r, op,
                             what, error);
    if (rc == 0 && !(also_ok && r.status == also_ok))
        rc = cl_sandbox_answer(s, h, &r, cl_backend, op, what, error);
    cl_resp_clear(&r);
    return rc;
}

/* is_alive's reading of the answer @j (NULL: none, its status @st): 0 with
 * @s's gone flag set on a 404 or an ended @state_key, 1 alive, -1 else. */
static int cl_alive_of(cl_sandbox *s, json_object *j, long st, const char *state_key,
                       const char *const *dead)
{
    if (!j) {
        if (st != 404)
            return -1;
        cl_gone_set(&s->gone);
        return 0;
    }
    const char *state = state_key ? cl_json_str(j, state_key) : NULL;
    int alive = !cl_str_in(state, dead);
    json_object_put(j);
    if (!alive)
        cl_gone_set(&s->gone);
    return alive;
}

int cl_sandbox_is_alive(cl_sandbox *s, cl_http *h, const sbx_call_ctx *ctx, const char *url,
                        const char *state_key, const char *const *dead, sbx_error **error)
{
    if (cl_gone_get(&s->gone))
        return 0;
    long st;
    json_object *j = cl_get_json(h, ctx, url, &st, "is_alive", "get the sandbox", error);
    return cl_alive_of(s, j, st, state_key, dead);
}

int cl_spec_is_alive(cl_sandbox *s, const cl_resume_spec *rs, const sbx_call_ctx *ctx,
                     sbx_error **error)
{
    if (cl_gone_get(&s->gone))
        return 0;
    long st = 0;
    json_object *j = rs->get(s->c, ctx, s->id, &st, "is_alive", error);
    return cl_alive_of(s, j, st, rs->state_key, rs->dead);
}

int cl_item_is_alive(cl_sandbox *s, cl_http *h, const sbx_call_ctx *ctx, const char *api,
                     const char *collection, const char *state_key, const char *const *dead,
                     sbx_error **error)
{
    char *url = cl_item_url(api, collection, s->id, "");
    int rc = cl_sandbox_is_alive(s, h, ctx, url, state_key, dead, error);
    free(url);
    return rc;
}

int cl_make_workdir(sbx_plugin_sandbox *sb, cl_run_fn run, const sbx_call_ctx *ctx,
                    const char *provider, const char *workdir, const char *op,
                    sbx_error **error)
{
    char *q = cl_shell_quote(workdir);
    char *cmd = q ? cl_printf("mkdir -p -- %s", q) : NULL;
    int code = 0;
    int rc = cmd ? run(sb, ctx, cmd, &code, op, error) : -1;
    if (!cmd)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    else if (rc == 0 && code != 0) {
        cl_context(cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                           "%s: cannot make the working directory %s (mkdir exited %d)",
                           provider, workdir, code), "path", workdir);
        rc = -1;
    }
    free(q);
    free(cmd);
    return rc;
}

int cl_set_mode(sbx_plugin_sandbox *sb, cl_run_fn run, const sbx_call_ctx *ctx, const char *path,
                const char *shown, uint32_t mode, const char *op, sbx_error **error)
{
    char *q = cl_shell_quote(path);
    char *cmd = q ? cl_printf("chmod %o -- %s", (unsigned)(mode & 07777), q) : NULL;
    int code = 0;
    int rc = cmd ? run(sb, ctx, cmd, &code, op, error) : -1;
    if (!cmd)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    else if (rc == 0 && code != 0) {
        cl_context(cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op,
                           "cannot set mode %o on %s (chmod exited %d)",
                           (unsigned)(mode & 07777), shown, code), "path", shown);
        rc = -1;
    }
    free(q);
    free(cmd);
    return rc;
}

int cl_write_file(sbx_plugin_sandbox *sb, const sbx_call_ctx *ctx, const char *workdir,
                  const char *path, int fd, uint32_t mode, cl_upload_fn upload, cl_run_fn run,
                  sbx_error **error)
{
    const char *op = "write_file";
    char *p = cl_path_in(workdir, path);
    if (!p) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    int rc = upload(sb, ctx, p, fd, path, op, error);
    if (rc == 0)
        rc = cl_set_mode(sb, run, ctx, p, path, mode, op, error);
    free(p);
    return rc;
}

int cl_client_config(const char *config_json, const char *provider, json_object **cfg,
                     sbx_error **error)
{
    *cfg = NULL;
    if (!config_json || !*config_json)
        return 0;
    json_object *j = json_tokener_parse(config_json);
    if (!j || !json_object_is_type(j, json_type_object)) {
        json_object_put(j);
        cl_fail(error, SBX_ERROR_CONFIGURATION, "client_new",
                "%s client options must be a JSON object", provider);
        return -1;
    }
    *cfg = j;
    return 0;
}

int cl_client_end(int rc, sbx_plugin_client *c, sbx_plugin_client **client, json_object *cfg,
                  cl_client_free_fn free_fn)
{
    json_object_put(cfg);
    if (rc < 0) {
        free_fn(c);
        return -1;
    }
    *client = c;
    return 0;
}

int cl_http_configure(cl_http *h, json_object *cfg, const char *const *key_envs,
                      const char *header, const char *prefix, sbx_error **error)
{
    cl_retry_policy pol = CL_RETRY_POLICY_DEFAULT;
    if (cl_retry_policy_from_config(cfg, &pol, error) < 0)
        return -1;
    cl_http_set_retry(h, &pol);
    char *key = cl_credential(key_envs, NULL, NULL);
    if (!key)
        return 0;
    char *value = cl_printf("%s%s", prefix ? prefix : "", key);
    int bad = !value || cl_http_set_auth(h, header, value) < 0 || cl_http_set_secret(h, key) < 0;
    free(value);
    free(key);
    if (bad) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, "client_new", "out of memory");
        return -1;
    }
    return 0;
}

sbx_error *cl_refuse(sbx_error **error, const char *provider, const char *option,
                     const char *value, const char *why)
{
    sbx_error *err = cl_fail(error, SBX_ERROR_CONFIGURATION, "create", "%s backend: %s%s%s: %s",
                             provider, option, value ? " " : "", value ? value : "", why);
    cl_context(err, "option", option);
    return err;
}

int cl_exec_wait(sbx_plugin_process *process, const sbx_call_ctx *ctx, int timeout_ms,
                 int *exit_code, sbx_error **error)
{
    (void)ctx;
    return cl_proc_wait((cl_proc *)(void *)process, timeout_ms, exit_code, "exec_wait", error);
}

int cl_exec_event_fd(sbx_plugin_process *process)
{
    return cl_proc_event_fd((cl_proc *)(void *)process);
}

int cl_exec_check(cl_sandbox *s, const char *provider, const sbx_plugin_exec_request *rq,
                  int per_command_user, sbx_error **error)
{
    if (cl_gone_check(&s->gone, "exec", provider, s->id, error) < 0)
        return -1;
    if (rq->tty_rows || rq->tty_cols) {
        cl_fail(error, SBX_ERROR_FEATURE_NOT_SUPPORTED, "exec",
                "%s backend: commands on a terminal are not supported", provider);
        return -1;
    }
    return cl_exec_check_pty(s, provider, rq, per_command_user, error);
}

int cl_exec_check_pty(cl_sandbox *s, const char *provider, const sbx_plugin_exec_request *rq,
                      int per_command_user, sbx_error **error)
{
    if (cl_gone_check(&s->gone, "exec", provider, s->id, error) < 0)
        return -1;
    if (!rq->tty_rows != !rq->tty_cols) {
        char size[32];
        snprintf(size, sizeof size, "%ux%u", rq->tty_rows, rq->tty_cols);
        cl_context(cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, "exec",
                           "%s backend: terminal size %u rows x %u columns is invalid (both "
                           "> 0, or both 0 for no terminal)", provider, rq->tty_rows,
                           rq->tty_cols), "size", size);
        return -1;
    }
    if (rq->user && !per_command_user) {
        cl_context(cl_fail(error, SBX_ERROR_FEATURE_NOT_SUPPORTED, "exec",
                           "%s backend: commands run as the sandbox's user; user %s cannot be "
                           "chosen per command", provider, rq->user), "user", rq->user);
        return -1;
    }
    return 0;
}

int cl_ids_add(cl_ids *s, const char *id)
{
    char **nv = id ? realloc(s->v, (s->n + 2) * sizeof(char *)) : NULL;
    if (!nv)
        return id ? -1 : 0;
    s->v = nv;
    if (!(s->v[s->n] = strdup(id)))
        return -1;
    s->v[++s->n] = NULL;
    return 0;
}

int cl_ids_listed(void *ud, json_object *item)
{
    cl_listed_ids *l = ud;
    cl_ids_add(&l->ids, cl_json_str(item, l->id_key));
    return 0;
}

int cl_ids_finish(cl_ids *s, int rc, char ***ids, const char *op, sbx_error **error)
{
    if (rc == 0 && !s->v && !(s->v = calloc(1, sizeof(char *)))) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        rc = -1;
    }
    if (rc == 0)
        *ids = s->v;
    else
        cl_strv_free(s->v);
    s->v = NULL;
    s->n = 0;
    return rc < 0 ? -1 : 0;
}

int cl_exec_launch(cl_proc *p, cl_proc_run_fn run, void *ud, int made,
                   const sbx_plugin_exec_request *rq, int *stdin_fd, const char *op,
                   sbx_error **error)
{
    if (made && rq->stdin_fd >= 0 && (*stdin_fd = fcntl(rq->stdin_fd, F_DUPFD_CLOEXEC, 3)) < 0)
        made = 0;
    if (!made) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "cannot start the command: %s",
                strerror(errno ? errno : ENOMEM));
        return -1;
    }
    p->run = run;
    p->ud = ud;
    return cl_proc_start(p, rq->stdout_fd, rq->stderr_fd, op, error);
}

void cl_script_proc_free(cl_script_proc *p)
{
    if (p->fini)
        p->fini(p);
    if (p->stdin_fd >= 0)
        close(p->stdin_fd);
    cl_strv_free(p->env);
    free(p->script);
    free(p);
}

cl_script_proc *cl_script_proc_new(size_t size, sbx_plugin_sandbox *sb, const char *workdir,
                                   const sbx_plugin_exec_request *rq, cl_run_fn run_short,
                                   const char *op, sbx_error **error)
{
    cl_script_proc *p = calloc(1, size < sizeof(*p) ? sizeof(*p) : size);
    if (!p) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return NULL;
    }
    p->sb = sb;
    p->stdin_fd = -1;
    p->run_short = run_short;
    if (rq->struct_size >= offsetof(sbx_plugin_exec_request, flags) + sizeof(rq->flags))
        p->flags = rq->flags;
    memcpy(p->tag, "sbx-exec-", 9);
    cl_random_hex(p->tag + 9, 12);
    p->script = cl_shell_script(rq->argv, rq->shell, rq->cwd ? rq->cwd : workdir);
    p->env = cl_strv_dup(rq->env);
    if (!p->script || !p->env) {
        cl_script_proc_free(p);
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return NULL;
    }
    return p;
}

int cl_script_proc_launch(cl_script_proc *p, cl_proc_run_fn run,
                          const sbx_plugin_exec_request *rq, const char *op,
                          sbx_plugin_process **process, sbx_error **error)
{
    if (cl_exec_launch(&p->base, run, p, 1, rq, &p->stdin_fd, op, error) < 0) {
        cl_script_proc_free(p);
        return -1;
    }
    *process = (sbx_plugin_process *)p;
    return 0;
}

int cl_script_exec_start(sbx_plugin_sandbox *sb, const char *provider, const char *workdir,
                         const sbx_plugin_exec_request *rq, cl_run_fn run_short,
                         cl_proc_run_fn run, sbx_plugin_process **process, sbx_error **error)
{
    if (cl_exec_check((cl_sandbox *)(void *)sb, provider, rq, 0, error) < 0)
        return -1;
    cl_script_proc *p = cl_script_proc_new(sizeof(*p), sb, workdir, rq, run_short, "exec",
                                           error);
    return p ? cl_script_proc_launch(p, run, rq, "exec", process, error) : -1;
}

int cl_script_env_prelude(cl_script_proc *p, const sbx_call_ctx *ctx, cl_upload_bytes_fn up,
                          cl_buf *pre, const char *op)
{
    if (!p->env || !p->env[0])
        return 0;
    char path[64];
    snprintf(path, sizeof path, "/tmp/.%s.env", p->tag);
    char *envf = cl_env_exports((const char *const *)p->env);
    int rc = 1;     /* 1: out of memory */
    if (envf && up(p->sb, ctx, path, envf, strlen(envf), op, NULL) < 0)
        rc = -1;
    else if (envf)
        rc = cl_buf_printf(pre, ". %s; rm -f %s\n", path, path) < 0;
    free(envf);
    if (rc > 0)
        cl_fail(NULL, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    return rc ? -1 : 0;
}

int cl_script_stdin_file(cl_script_proc *p, const sbx_call_ctx *ctx, cl_upload_fn up,
                         const char *dir, char path[CL_STDIN_PATH_MAX], const char *op)
{
    if (p->stdin_fd < 0) {
        snprintf(path, CL_STDIN_PATH_MAX, "/dev/null");
        return 0;
    }
    snprintf(path, CL_STDIN_PATH_MAX, "%s/.%s.in", dir, p->tag);
    return up(p->sb, ctx, path, p->stdin_fd, "stdin", op, NULL) < 0 ? -1 : 0;
}

int cl_script_stdin_prelude(cl_script_proc *p, const sbx_call_ctx *ctx, cl_upload_fn up,
                            const char *dir, cl_buf *pre, const char *op)
{
    char path[CL_STDIN_PATH_MAX];
    if (cl_script_stdin_file(p, ctx, up, dir, path, op) < 0)
        return -1;
    if ((p->stdin_fd >= 0 ? cl_buf_printf(pre, "exec <%s; rm -f %s\n", path, path)
                          : cl_buf_printf(pre, "exec </dev/null\n")) < 0) {
        cl_fail(NULL, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    return 0;
}

int cl_script_exec_wait(sbx_plugin_process *process, const sbx_call_ctx *ctx, int timeout_ms,
                        int *exit_code, sbx_error **error)
{
    (void)ctx;
    cl_script_proc *p = (cl_script_proc *)(void *)process;
    return cl_exec_wait_script(process, p->sb, p->script, p->run_short, timeout_ms, exit_code,
                               error);
}

int cl_script_exec_kill(sbx_plugin_process *process, const sbx_call_ctx *ctx, int sig,
                        sbx_error **error)
{
    cl_script_proc *p = (cl_script_proc *)(void *)process;
    return cl_proc_mark_kill(&p->base, p->sb, p->run_short, ctx, p->tag, sig, error);
}

int cl_script_exec_end_info(sbx_plugin_process *process, const sbx_call_ctx *ctx,
                            uint64_t *flags, sbx_error **error)
{
    (void)ctx;
    (void)error;
    cl_script_proc *p = (cl_script_proc *)(void *)process;
    pthread_mutex_lock(&p->base.lock);
    *flags = p->oom_killed ? SBX_PLUGIN_EXEC_OOM_KILLED : 0;
    pthread_mutex_unlock(&p->base.lock);
    return 0;
}

void cl_script_exec_free(sbx_plugin_process *process)
{
    cl_script_proc *p = (cl_script_proc *)(void *)process;
    if (!p)
        return;
    pthread_mutex_lock(&p->base.lock);
    int ended = p->base.ended;
    pthread_mutex_unlock(&p->base.lock);
    /* The worker is stopped and joined before the kill: a worker still
     * taking the command's stdin (read to its end for the file it uploads,
     * which ends as the host closes it before this free) would otherwise
     * start the command after the kill had looked for its processes, and
     * the command would run on. Once joined, nothing starts it any more;
     * the kill then reaches whatever of it runs. A worker that had ended
     * before the free (the command's end seen: its background processes
     * live on; or a failure, such as a sandbox stopped, which a kill would
     * only start again) is followed by no kill, as before. */
    cl_proc_clear(&p->base);
    if (!ended && !cl_gone_get(&((cl_sandbox *)(void *)p->sb)->gone)) {
        sbx_call_ctx c2 = { sizeof(c2), cl_now() + 30, -1, NULL };
        cl_mark_kill(p->sb, p->run_short, &c2, p->tag, SIGKILL, NULL);
    }
    cl_script_proc_free(p);
}

void cl_proc_context(cl_proc *p, const char *key, const char *value)
{
    pthread_mutex_lock(&p->lock);
    int i = 0;
    while (i < p->err_nctx && strcmp(p->err_ctx_key[i], key) != 0)
        i++;
    if (i < CL_PROC_CTX_MAX) {
        snprintf(p->err_ctx_key[i], sizeof p->err_ctx_key[i], "%s", key);
        snprintf(p->err_ctx_val[i], sizeof p->err_ctx_val[i], "%s", value);
        if (i == p->err_nctx)
            p->err_nctx++;
    }
    pthread_mutex_unlock(&p->lock);
}

void cl_proc_gone(cl_proc *p, const char *id)
{
    cl_proc_context(p, "reason", "gone");
    if (id)
        cl_proc_context(p, "sandbox_id", id);
}

void cl_proc_fail_in(cl_proc *p, cl_sandbox *s)
{
    cl_proc_fail_last(p);
    if (cl_gone_get(&s->gone))
        cl_proc_gone(p, s->id);
}

int cl_exec_wait_script(sbx_plugin_process *process, sbx_plugin_sandbox *sb,
                        const char *script, cl_run_fn run, int timeout_ms, int *exit_code,
                        sbx_error **error)
{
    int rc = cl_proc_wait((cl_proc *)(void *)process, timeout_ms, exit_code, "exec_wait", error);
    /* A missing working directory: the script's cd failed (cloud.h). */
    char *quoted = rc == 1 && *exit_code == CL_CWD_MISSING_EXIT ? cl_script_cwd(script) : NULL;
    if (quoted) {
        char *cmd = cl_printf("test -d %s", quoted);
        int code = 0;
        sbx_call_ctx c2 = { sizeof(c2), cl_now() + 30, -1, NULL };
        if (cmd && run(sb, &c2, cmd, &code, "exec", NULL) == 0 && code != 0) {
            cl_cwd_missing_error(error, "exec", quoted);
            rc = -1;
        }
        free(cmd);
        free(quoted);
    }
    return rc;
}

int cl_mark_kill(sbx_plugin_sandbox *sb, cl_run_fn run, const sbx_call_ctx *ctx,
                 const char *tag, int sig, sbx_error **error)
{
    char *cmd = cl_mark_kill_command(tag, sig);
    int code = 0;
    int rc = cmd ? run(sb, ctx, cmd, &code, "exec_kill", error) : -1;
    if (!cmd)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, "exec_kill", "out of memory");
    free(cmd);
    return rc;
}

int cl_proc_mark_kill(cl_proc *p, sbx_plugin_sandbox *sb, cl_run_fn run,
                      const sbx_call_ctx *ctx, const char *tag, int sig, sbx_error **error)
{
    pthread_mutex_lock(&p->lock);
    int ended = p->ended;
    pthread_mutex_unlock(&p->lock);
    return ended ? 0 : cl_mark_kill(sb, run, ctx, tag, sig, error);
}

int cl_resize_check(unsigned tty_rows, sbx_error **error)
{
    if (tty_rows)
        return 0;
    cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, "exec_resize",
            "the process has no terminal to resize");
    return -1;
}

int cl_resize_wait(const cl_bound *b, pthread_cond_t *cond, pthread_mutex_t *lock,
                   const char *msg, sbx_error **error)
{
    if (cl_bound_cond_wait(b, cond, lock) == 0)
        return 0;
    pthread_mutex_unlock(lock);
    cl_fail(error, SBX_ERROR_TIMEOUT, "exec_resize", "%s", msg);
    return -1;
}

int cl_proc_mark_resize(cl_proc *p, sbx_plugin_sandbox *sb, cl_run_fn run,
                        const sbx_call_ctx *ctx, const char *tag, unsigned rows, unsigned cols,
                        sbx_error **error)
{
    const char *op = "exec_resize";
    pthread_mutex_lock(&p->lock);
    int ended = p->ended;
    pthread_mutex_unlock(&p->lock);
    if (ended)
        return 0;
    char *cmd = cl_mark_resize_command(tag, rows, cols);
    int code = 0;
    int rc = cmd ? run(sb, ctx, cmd, &code, op, error) : -1;
    if (!cmd)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    free(cmd);
    if (rc < 0 || code == 0)
        return rc;
    pthread_mutex_lock(&p->lock);
    ended = p->ended;
    pthread_mutex_unlock(&p->lock);
    if (ended)
        return 0;
    char size[32];
    snprintf(size, sizeof size, "%ux%u", rows, cols);
    sbx_error *err;
    if (code == CL_RESIZE_NONE_EXIT)
        err = cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op, "cannot resize the terminal to %s: "
                      "no process of the command has it as its stdin", size);
    else
        err = cl_fail(error, SBX_ERROR_EXECUTION_FAILED, op, "cannot resize the terminal to %s "
                      "(stty exited %d)", size, code);
    cl_context(err, "size", size);
    return -1;
}

char *cl_item_url(const char *api, const char *collection, const char *id, const char *suffix)
{
    char *esc = cl_url_escape(id);
    char *url = esc ? cl_printf("%s/%s/%s%s", api, collection, esc, suffix) : NULL;
    free(esc);
    return url;
}

int cl_sandbox_refused(cl_sandbox *s, cl_http *h, const cl_call_spec *cs,
                       const sbx_call_ctx *ctx, const cl_resp *r, unsigned how, const char *op,
                       const char *what, sbx_error **error)
{
    const cl_resume_spec *rs = cs->rs;
    int file = (how & CL_CALL_FILE)
               && (r->status == 404 || (r->status == 400 && (cs->flags & CL_CALLS_FILE_400)));
    if (r->status == 404 && !file && (cs->flags & CL_CALLS_404_GONE)) {
        cl_gone_set(&s->gone);
        spec_gone_error(rs, error, op, s->id, NULL);
    } else if ((r->status == 404 || (cs->flags & CL_CALLS_LOOK_ANY))
               && cl_sandbox_confirm_gone(s, s->c, ctx, rs, op, error)) {
        ;
    } else if (!file) {
        cl_fail_status(h, error, CL_CODE_BY_STATUS, r, op, what);
    }
    return -1;
}

int cl_sandbox_request(cl_sandbox *s, cl_http *h, const cl_call_spec *cs,
                       const sbx_call_ctx *ctx, cl_req *rq, char *url, unsigned how, cl_resp *r,
                       const char *op, sbx_error **error)
{
    if (cl_gone_check(&s->gone, op, cs->rs->provider, s->id, error) < 0) {
        free(url);
        return -1;
    }
    if (cl_request_at(h, ctx, rq, url, r, op, error) < 0)
        return -1;
    if (r->status / 100 == 2 || ((how & CL_CALL_OK_408) && r->status == 408))
        return 0;
    return cl_sandbox_refused(s, h, cs, ctx, r, how, op, rq->what, error);
}

int cl_plane_request(cl_sandbox *s, cl_http *h, const cl_call_spec *cs, const sbx_call_ctx *ctx,
                     cl_req *rq, const char *path, unsigned how, cl_resp *r, const char *op,
                     sbx_error **error)
{
    return cl_sandbox_request(s, h, cs, ctx, rq, s->plane ? cl_printf("%s%s", s->plane, path)
                                                          : NULL, how, r, op, error);
}

int cl_request_at(cl_http *h, const sbx_call_ctx *ctx, cl_req *rq, char *url, cl_resp *r,
                  const char *op, sbx_error **error)
{
    if (!url) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    rq->url = url;
    int rc = cl_request(h, ctx, rq, r, op, error);
    rq->url = NULL;
    free(url);
    return rc;
}

int cl_post_json(cl_http *h, const sbx_call_ctx *ctx, char *url, json_object *body,
                 cl_idempotency idem, cl_resp *r, const char *op, const char *what,
                 sbx_error **error)
{
    if (!url) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    json_object *empty = body ? NULL : json_object_new_object();
    int rc = cl_request_json(h, ctx, "POST", url, body ? body : empty, idem, r, op, what,
                             error);
    json_object_put(empty);
    free(url);
    return rc;
}

int cl_item_request(cl_http *h, const sbx_call_ctx *ctx, const char *method, const char *api,
                    const char *collection, const char *id, const char *suffix,
                    json_object *body, cl_idempotency idem, cl_resp *r, const char *op,
                    const char *what, sbx_error **error)
{
    char *url = cl_item_url(api, collection, id, suffix);
    if (!url) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    int rc = cl_request_json(h, ctx, method, url, body, idem, r, op, what, error);
    free(url);
    return rc;
}

json_object *cl_get_json(cl_http *h, const sbx_call_ctx *ctx, const char *url, long *status,
                         const char *op, const char *what, sbx_error **error)
{
    *status = 0;
    if (!url) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return NULL;
    }
    cl_resp r = { 0 };
    json_object *j = NULL;
    if (cl_request_json(h, ctx, "GET", url, NULL, CL_SAFE, &r, op, what, error) == 0) {
        *status = r.status;
        if (r.status == 200)
            j = cl_resp_json(&r, op, what, error);
        else if (r.status != 404)
            cl_fail_status(h, error, CL_CODE_BY_STATUS, &r, op, what);
    }
    cl_resp_clear(&r);
    return j;
}

int cl_delete_url(cl_http *h, const sbx_call_ctx *ctx, const char *url, const char *op,
                  const char *what, sbx_error **error)
{
    if (!url) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    cl_resp r = { 0 };
    int rc = -1;
    if (cl_request_json(h, ctx, "DELETE", url, NULL, CL_SAFE, &r, op, what, error) == 0) {
        if (r.status / 100 == 2 || r.status == 404)
            rc = 0;
        else
            cl_fail_status(h, error, CL_CODE_BY_STATUS, &r, op, what);
    }
    cl_resp_clear(&r);
    return rc;
}

json_object *cl_item_get(cl_http *h, const sbx_call_ctx *ctx, const char *api,
                         const char *collection, const char *id, long *status, const char *op,
                         const char *what, sbx_error **error)
{
    char *url = cl_item_url(api, collection, id, "");
    json_object *j = cl_get_json(h, ctx, url, status, op, what, error);
    free(url);
    return j;
}

int cl_item_delete(cl_http *h, const sbx_call_ctx *ctx, const char *api, const char *collection,
                   const char *id, const char *op, const char *what, sbx_error **error)
{
    char *url = cl_item_url(api, collection, id, "");
    int rc = cl_delete_url(h, ctx, url, op, what, error);
    free(url);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* A multipart/form-data body (runloop's upload_file)                        */
/* ------------------------------------------------------------------------ */

int cl_form_begin(cl_form *f, const char *const *fields, const char *file_field,
                  const char *filename)
{
    char bnd[40] = "sbx-form-";
    cl_random_hex(bnd + 9, 12);
    memset(f, 0, sizeof(*f));
    int bad = 0;
    for (size_t i = 0; !bad && fields && fields[i] && fields[i + 1]; i += 2)
        bad = cl_buf_printf(&f->head, "--%s\r\nContent-Disposition: form-data; name=\"%s\""
                            "\r\n\r\n%s\r\n", bnd, fields[i], fields[i + 1]) < 0;
    bad = bad || cl_buf_printf(&f->head, "--%s\r\nContent-Disposition: form-data; name=\"%s\"; "
                               "filename=\"%s\"\r\nContent-Type: application/octet-stream"
                               "\r\n\r\n", bnd, file_field, filename) < 0;
    if (bad) {
        cl_form_clear(f);
        return -1;
    }
    f->tail_len = (size_t)snprintf(f->tail, sizeof f->tail, "\r\n--%s--\r\n", bnd);
    snprintf(f->ctype, sizeof f->ctype, "multipart/form-data; boundary=%s", bnd);
    return 0;
}

void cl_form_clear(cl_form *f)
{
    cl_buf_clear(&f->head);
    f->tail[0] = f->ctype[0] = '\0';
    f->tail_len = 0;
}

int cl_multipart_body(cl_buf *out, char *ctype, size_t ctype_cap, const char *const *fields,
                      const char *file_field, const char *filename, int fd, const char *shown,
                      const char *op, sbx_error **error)
{
    cl_form f = { 0 };
    int bad = ctype_cap < 64 || cl_form_begin(&f, fields, file_field, filename) < 0;
    bad = bad || cl_buf_append(out, f.head.data, f.head.len) < 0;
    char chunk[65536];
    while (!bad) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            cl_context(cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, op,
                               "cannot read the data for %s: %s", shown, strerror(errno)),
                       "path", shown);
            cl_form_clear(&f);
            return -1;
        }
        if (n == 0)
            break;
        bad = cl_buf_append(out, chunk, (size_t)n) < 0;
    }
    if (bad || cl_buf_append(out, f.tail, f.tail_len) < 0) {
        cl_form_clear(&f);
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        return -1;
    }
    snprintf(ctype, ctype_cap, "%s", f.ctype);
    cl_form_clear(&f);
    return 0;
}

void cl_fd_body_init(cl_fd_body *m, const char *head, size_t head_len, const char *tail,
                     size_t tail_len, int fd, int spool, const char *what, const char *op)
{
    *m = (cl_fd_body){ .head = head, .tail = tail, .head_len = head_len, .tail_len = tail_len,
                       .fd = fd, .what = what, .op = op };
    if (spool && !(m->spool = tmpfile()))
        CL_LOG(SBX_LOG_WARNING, "cannot make a spool file for %s (%s): it cannot be sent "
               "again", what, strerror(errno));
    m->spool_ok = m->spool != NULL;
}

/* The next bytes of the fixed part @src (@len bytes, *@off of them given
 * already) into @buf (@cap bytes): how many (0 once all were given). */
static ssize_t fd_body_take(char *buf, size_t cap, const char *src, size_t len, size_t *off)
{
    size_t n = len - *off;
    if (n > cap)
        n = cap;
    memcpy(buf, src + *off, n);
    *off += n;
    return (ssize_t)n;
}

ssize_t cl_fd_body_read(void *ud, char *buf, size_t cap)
{
    cl_fd_body *m = ud;
    if (m->head_off < m->head_len)
        return fd_body_take(buf, cap, m->head, m->head_len, &m->head_off);
    if (m->replaying) {
        size_t n = fread(buf, 1, cap, m->spool);
        if (n > 0)
            return (ssize_t)n;
        m->replaying = 0;
        if (ferror(m->spool) || fseek(m->spool, 0, SEEK_END) != 0) {
            cl_fail(NULL, SBX_ERROR_EXECUTION_FAILED, m->op, "cannot read back the spooled "
                    "%s: %s", m->what, strerror(errno ? errno : EIO));
            return -1;
        }
    }
    if (!m->at_eof) {
        ssize_t n = cl_fd_source(&m->fd, buf, cap);
        if (n > 0 && m->spool_ok && fwrite(buf, 1, (size_t)n, m->spool) != (size_t)n) {
            CL_LOG(SBX_LOG_WARNING, "cannot spool %s (%s): it cannot be sent again", m->what,
                   strerror(errno ? errno : EIO));
            m->spool_ok = 0;
        }
        if (n != 0)
            return n;
        m->at_eof = 1;
    }
    return fd_body_take(buf, cap, m->tail, m->tail_len, &m->tail_off);
}

int cl_fd_body_rewind(void *ud)
{
    cl_fd_body *m = ud;
    if (!m->spool_ok || fflush(m->spool) != 0 || fseek(m->spool, 0, SEEK_SET) != 0)
        return -1;
    m->head_off = m->tail_off = 0;
    m->replaying = 1;
    return 0;
}

void cl_fd_body_clear(cl_fd_body *m)
{
    if (m->spool)
        fclose(m->spool);
    m->spool = NULL;
    m->spool_ok = 0;
}

/* ------------------------------------------------------------------------ */
/* The create's options by table, its labels, and what a listing owns       */
/* ------------------------------------------------------------------------ */

int cl_refuse_options(const sbx_plugin_create_request *rq, const char *provider,
                      const cl_unsupported *table, sbx_error **error)
{
    uint64_t set = rq->set_fields;
    for (const cl_unsupported *u = table; u && u->option; u++) {
        const char *o = u->option, *value = NULL;
        char buf[64];
        int given;
        if (strcmp(o, "cpu") == 0) {
            given = (set & SBX_OPTION_CPU) != 0;
            snprintf(buf, sizeof buf, "%g", rq->cpu);
            value = buf;
        } else if (strcmp(o, "memory_mb") == 0 || strcmp(o, "disk_mb") == 0) {
            int mem = o[0] == 'm';
            given = (set & (mem ? SBX_OPTION_MEMORY_MB : SBX_OPTION_DISK_MB)) != 0;
            snprintf(buf, sizeof buf, "%lld", (long long)(mem ? rq->memory_mb : rq->disk_mb));
            value = buf;
        } else if (strcmp(o, "allow_internet") == 0) {
            given = !rq->allow_internet;
            value = "false";
        } else {
            static const char *const names[] = { "gpu", "image", "template", "snapshot_id",
                                                 "app_name" };
            const char *const values[] = { rq->gpu, rq->image, rq->template_name,
                                           rq->snapshot_id, rq->app_name };
            size_t k = 0;
            while (k < 5 && strcmp(o, names[k]) != 0)
                k++;
            if (k == 5) {
                cl_context(cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, "create", "%s backend: "
                                   "no such create option to refuse: %s", provider, o),
                           "option", o);
                return -1;
            }
            value = values[k];
            given = value && *value;
        }
        if (given) {
            cl_refuse(error, provider, o, value, u->why);
            return -1;
        }
    }
    return 0;
}

long long cl_lifetime_s(const sbx_plugin_create_request *rq, const char *provider,
                        long long dflt_s, long long margin_s, sbx_error **error)
{
    if (!(rq->set_fields & SBX_OPTION_TIMEOUT_SECS))
        return dflt_s;
    if (!(rq->timeout_secs > 0)) {
        char buf[64];
        snprintf(buf, sizeof buf, "%g", rq->timeout_secs);
        cl_refuse(error, provider, "timeout_secs", buf, "must be more than 0");
        return -1;
    }
    long long t = (long long)rq->timeout_secs;
    if ((double)t < rq->timeout_secs)
        t++;    /* rounded up */
    return t + margin_s;
}

/* @v as a refusal names it: a whole number below 1e15 in digits alone
 * ("1000000", not "1e+06"), else the shortest "%g" form with 6 to 17
 * significant digits that reads back as @v ("86400.01", not "86400"). */
static void limit_text(char *buf, size_t size, double v)
{
    if (isfinite(v) && v == floor(v) && fabs(v) < 1e15) {
        snprintf(buf, size, "%.0f", v == 0 ? 0.0 : v);
        return;
    }
    for (int p = 6; p <= 17; p++) {
        snprintf(buf, size, "%.*g", p, v);
        if (!isfinite(v) || strtod(buf, NULL) == v)
            return;
    }
}

int cl_limits_check(const sbx_plugin_create_request *rq, const char *provider,
                    const cl_limit *table, sbx_error **error)
{
    static const char *const names[] = { "cpu", "memory_mb", "disk_mb", "timeout_secs" };
    static const uint64_t bits[] = { SBX_OPTION_CPU, SBX_OPTION_MEMORY_MB, SBX_OPTION_DISK_MB,
                                     SBX_OPTION_TIMEOUT_SECS };
    for (const cl_limit *l = table; l && l->option; l++) {
        size_t k = 0;
        while (k < 4 && strcmp(l->option, names[k]) != 0)
            k++;
        if (k == 4) {
            cl_context(cl_fail(error, SBX_ERROR_INVALID_ARGUMENT, "create", "%s backend: no "
                               "such number option to check: %s", provider, l->option),
                       "option", l->option);
            return -1;
        }
        if (!(rq->set_fields & bits[k]) && !(l->flags & CL_LIMIT_ALWAYS))
            continue;
        double v = k == 0 ? rq->cpu : k == 1 ? (double)rq->memory_mb
                 : k == 2 ? (double)rq->disk_mb : rq->timeout_secs;
        if (v == 0 && (l->flags & CL_LIMIT_ZERO_NONE))
            continue;
        int ok = (l->flags & CL_LIMIT_ABOVE) ? v > l->min : v >= l->min;
        if (ok && l->max > 0)
            ok = v <= l->max;
        if (ok && l->step > 0)
            ok = fmod(v, l->step) == 0;
        if (ok)
            continue;
        char buf[64];
        if (k == 1 || k == 2)
            snprintf(buf, sizeof buf, "%lld", (long long)(k == 1 ? rq->memory_mb : rq->disk_mb));
        else
            limit_text(buf, sizeof buf, v);
        sbx_error *err = cl_refuse(error, provider, l->option, buf, l->why);
        const char *const keys[] = { l->min_key, l->max_key, l->step_key };
        const double values[] = { l->min, l->max, l->step };
        for (int i = 0; i < 3; i++) {
            if (!keys[i])
                continue;
            limit_text(buf, sizeof buf, values[i]);
            cl_context(err, keys[i], buf);
        }
        return -1;
    }
    return 0;
}

int cl_gpu_parse(const char *gpu, const char *const *known, long max_count, size_t *type_len,
                 long *count)
{
    if (!gpu)
        return -1;
    const char *colon = strchr(gpu, ':');
    size_t n = colon ? (size_t)(colon - gpu) : strlen(gpu);
    long c = 1;
    if (colon) {
        char *end = NULL;
        c = strtol(colon + 1, &end, 10);
        if (end == colon + 1 || *end || c < 1 || c > max_count)
            return -1;
    }
    int ok = 0;
    if (known) {
        for (size_t i = 0; known[i] && !ok; i++)
            ok = strlen(known[i]) == n && strncmp(known[i], gpu, n) == 0;
    } else {
        ok = n > 0 && n < 64;
        for (size_t i = 0; ok && i < n; i++)
            ok = isalnum((unsigned char)gpu[i]) || gpu[i] == '-';
    }
    if (!ok)
        return -1;
    *type_len = n;
    *count = c;
    return 0;
}

int cl_no_backend_options(const sbx_plugin_create_request *rq, const char *provider,
                          sbx_error **error)
{
    if (!rq->backend_options || !*rq->backend_options)
        return 0;
    json_object *bo = json_tokener_parse(rq->backend_options);
    const char *key = NULL;
    int object = bo && json_object_is_type(bo, json_type_object);
    if (object) {
        json_object_object_foreach(bo, k, v) {
            (void)v;
            key = k;
            break;
        }
    }
    int rc = 0;
    if (key || !object) {
        sbx_error *err = key
            ? cl_fail(error, SBX_ERROR_CONFIGURATION, "create", "%s backend_options: unknown "
                      "key \"%s\" (the %s backend takes no backend options)", provider, key,
                      provider)
            : cl_fail(error, SBX_ERROR_CONFIGURATION, "create", "%s backend_options: %s is "
                      "not a JSON object", provider, rq->backend_options);
        cl_context(err, "option", "backend_options");
        if (key)
            cl_context(err, "name", key);
        rc = -1;
    }
    json_object_put(bo);
    return rc;
}

/* 1 when @v is a value of @o's type. */
static int option_ok(const cl_option *o, json_object *v)
{
    switch (o->type) {
    case CL_OPTION_BOOL:
        return json_object_is_type(v, json_type_boolean);
    case CL_OPTION_STRING: {
        /* Text only: such a value goes into a header, a URL or a body, and
         * a CR LF in it would be a header of its own, a NUL cut it short. */
        if (!json_object_is_type(v, json_type_string) || json_object_get_string_len(v) <= 0)
            return 0;
        const unsigned char *p = (const unsigned char *)json_object_get_string(v);
        for (int i = 0; i < json_object_get_string_len(v); i++)
            if (p[i] < 0x20 || p[i] == 0x7f)
                return 0;
        return 1;
    }
    default: {
        int64_t n = json_object_is_type(v, json_type_int) ? json_object_get_int64(v) : 0;
        return n > 0 && n <= o->max;
    }
    }
}

/* What a value of @o's type is, for the refusal of one that is not:
 * "true or false", "a non-empty string without control characters", "a
 * whole number from 1 to MAX". */
static void option_wanted(const cl_option *o, char *out, size_t cap)
{
    if (o->type == CL_OPTION_BOOL)
        snprintf(out, cap, "true or false");
    else if (o->type == CL_OPTION_STRING)
        snprintf(out, cap, "a non-empty string without control characters");
    else
        snprintf(out, cap, "a whole number from 1 to %lld", o->max);
}

/* Stores in each entry's @to (when not NULL) the value of its key in the
 * object @bo, every value already checked (option_ok): the strings first, so
 * that a copy that cannot be made stores nothing. 0, or -1 on no memory. */
static int store_options(json_object *bo, const cl_option *table)
{
    int rc = 0;
    for (int pass = 0; pass < 3; pass++) {
        for (const cl_option *o = table; o->key; o++) {
            json_object *v;
            if (!o->to || !json_object_object_get_ex(bo, o->key, &v))
                continue;
            if (o->type == CL_OPTION_STRING && pass == 0) {
                if (!(*(char **)o->to = strdup(json_object_get_string(v))))
                    rc = -1;
            } else if (o->type == CL_OPTION_STRING && pass == 1 && rc < 0) {
                free(*(char **)o->to);
                *(char **)o->to = NULL;
            } else if (o->type == CL_OPTION_BOOL && pass == 2 && rc == 0) {
                *(int *)o->to = json_object_get_boolean(v);
            } else if (o->type == CL_OPTION_COUNT && pass == 2 && rc == 0) {
                *(long long *)o->to = (long long)json_object_get_int64(v);
            }
        }
    }
    return rc;
}

int cl_backend_options(const sbx_plugin_create_request *rq, const char *provider,
                       const cl_option *table, sbx_error **error)
{
    const char *op = "create";
    if (!rq->backend_options || !*rq->backend_options)
        return 0;
    json_object *bo = json_tokener_parse(rq->backend_options);
    sbx_error *err = NULL;
    cl_buf known = { 0 };
    int oom = 0, bad = 1;
    for (const cl_option *o = table; o->key; o++)
        oom |= cl_buf_printf(&known, "%s\"%s\"", o == table ? "" : ", ", o->key) < 0;
    if (oom) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    } else if (!bo || !json_object_is_type(bo, json_type_object)) {
        err = cl_fail(error, SBX_ERROR_CONFIGURATION, op, "%s backend_options: %s is not a "
                      "JSON object", provider, rq->backend_options);
    } else {
        bad = 0;
        json_object_object_foreach(bo, k, v) {
            const cl_option *o = table;
            while (o->key && strcmp(o->key, k) != 0)
                o++;
            if (!o->key) {
                err = cl_fail(error, SBX_ERROR_CONFIGURATION, op, "%s backend_options: unknown "
                              "key \"%s\" (known: %s)", provider, k, known.data ? known.data : "");
                cl_context(err, "name", k);
                cl_context(err, "known", known.data ? known.data : "");
                bad = 1;
                break;
            }
            if (!option_ok(o, v)) {
                char what[64];
                option_wanted(o, what, sizeof what);
                err = cl_fail(error, SBX_ERROR_CONFIGURATION, op, "%s backend_options: %s %s is "
                              "not %s", provider, k, json_object_to_json_string(v), what);
                cl_context(err, "name", k);
                bad = 1;
                break;
            }
        }
    }
    cl_buf_clear(&known);
    if (bad) {
        cl_context(err, "option", "backend_options");
        json_object_put(bo);
        return -1;
    }
    /* Every key is known and every value of its type: stored. */
    int rc = store_options(bo, table);
    if (rc < 0)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    json_object_put(bo);
    return rc;
}

int cl_client_options(json_object *config, const cl_option *table, sbx_error **error)
{
    if (!config)
        return 0;
    for (const cl_option *o = table; o->key; o++) {
        json_object *v;
        if (!json_object_object_get_ex(config, o->key, &v) || option_ok(o, v))
            continue;
        char what[64];
        option_wanted(o, what, sizeof what);
        cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, "client_new", "%s client option %s %s "
                           "is not %s", cl_backend, o->key, json_object_to_json_string(v), what),
                   "option", o->key);
        return -1;
    }
    if (store_options(config, table) < 0) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, "client_new", "out of memory");
        return -1;
    }
    return 0;
}

json_object *cl_meta_labels(const sbx_call_ctx *ctx, const char *backend, double expires_at)
{
    json_object *m = json_object_new_object();
    json_object_object_add(m, CL_META_BACKEND, json_object_new_string(backend));
    if (ctx && ctx->create_token)
        json_object_object_add(m, CL_META_TOKEN, json_object_new_string(ctx->create_token));
    if (expires_at > 0) {
        char buf[64];
        snprintf(buf, sizeof buf, "%.0f", expires_at);
        json_object_object_add(m, CL_META_EXPIRES, json_object_new_string(buf));
    }
    return m;
}

double cl_rfc3339(const char *s)
{
    struct tm tm = { 0 };
    const char *e = s ? strptime(s, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
    if (!e)
        return 0;
    double frac = 0;
    if (*e == '.')
        frac = strtod(e, NULL);
    return (double)timegm(&tm) + frac;
}

int cl_owned_report(sbx_plugin_owned_fn fn, void *ud, const char *id, json_object *labels,
                    double created, const char *backend)
{
    const char *tok = cl_json_str(labels, CL_META_TOKEN);
    const char *exp = cl_json_str(labels, CL_META_EXPIRES);
    const char *be = cl_json_str(labels, CL_META_BACKEND);
    if (!id || !tok || (backend && (!be || strcmp(be, backend) != 0)))
        return 0;
    sbx_plugin_owned_info info = { sizeof(info), id, tok, created, exp ? strtod(exp, NULL) : 0 };
    return fn(&info, ud);
}

int cl_owned_listed(void *ud, json_object *item)
{
    const cl_owned *o = ud;
    return cl_owned_report(o->fn, o->ud, cl_json_str(item, o->id_key),
                           cl_json_path(item, o->labels_key, NULL),
                           o->created_key ? cl_rfc3339(cl_json_str(item, o->created_key)) : 0,
                           NULL);
}

int cl_list_pages(cl_http *h, const sbx_call_ctx *ctx, const cl_pages *pg, cl_listed_fn fn,
                  void *ud, const char *op, sbx_error **error)
{
    char *next = NULL;
    int rc = 0;
    for (int page = 0; page < 1000 && rc == 0; page++) {
        char *nt = next ? cl_url_escape(next) : NULL;
        char *url = next ? (nt ? cl_printf("%s&%s=%s", pg->url, pg->token_param, nt) : NULL)
                         : pg->url ? strdup(pg->url) : NULL;
        free(nt);
        free(next);
        next = NULL;
        rc = -1;
        if (!url) {
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
            break;
        }
        json_object *j = NULL;
        cl_resp r = { 0 };
        cl_req rq = { .method = "GET", .url = url, .idempotent = CL_SAFE,
                      .keep_header = pg->token_header, .what = pg->what };
        if (cl_request(h, ctx, &rq, &r, op, error) == 0) {
            if (r.status == 200)
                j = cl_resp_json(&r, op, pg->what, error);
            else
                cl_fail_status(h, error, CL_CODE_BY_STATUS, &r, op, pg->what);
        }
        free(url);
        json_object *items = pg->items_key ? cl_json_path(j, pg->items_key, NULL) : j;
        if ((pg->flags & CL_PAGES_ARRAY_TOO) && json_object_is_type(j, json_type_array))
            items = j;
        if (j && (pg->items_key || json_object_is_type(items, json_type_array))) {
            rc = 0;
            size_t n = json_object_is_type(items, json_type_array)
                       ? json_object_array_length(items) : 0;
            int stop = 0;
            for (size_t i = 0; i < n && !stop; i++)
                stop = fn(ud, json_object_array_get_idx(items, i)) != 0;
            const char *tok = pg->token_header ? r.kept_header : json_dotted_str(j, pg->token_key);
            if (n == 0 && (pg->flags & CL_PAGES_EMPTY_ENDS))
                tok = NULL;
            next = !stop && tok && *tok ? strdup(tok) : NULL;
        } else if (j) {
            cl_fail(error, SBX_ERROR_CONNECTION, op, "%s list answered with no array",
                    cl_backend);
        }
        cl_resp_clear(&r);
        json_object_put(j);
        if (!next)
            break;
    }
    free(next);
    return rc;
}

json_object *cl_list_page(cl_http *h, const sbx_call_ctx *ctx, char *url, const char *api,
                          const char *noun, const char *items_key, json_object **items,
                          const char *op, const char *what, sbx_error **error)
{
    long st = 0;
    json_object *j = cl_get_json(h, ctx, url, &st, op, what, error);
    free(url);
    *items = cl_json_path(j, items_key, NULL);
    if (!j) {
        if (st == 404)
            cl_fail(error, SBX_ERROR_NOT_FOUND, op, "%s: no %s list at %s", cl_backend, noun, api);
    } else if (!*items || !json_object_is_type(*items, json_type_array)) {
        cl_fail(error, SBX_ERROR_CONNECTION, op, "%s list answered with no %s array", cl_backend,
                items_key);
        json_object_put(j);
        j = NULL;
        *items = NULL;
    }
    return j;
}

/* ------------------------------------------------------------------------ */
/* A command's output reported as text                                      */
/* ------------------------------------------------------------------------ */

int cl_buf_report_encoder(cl_buf *b, int b64_max)
{
    return cl_buf_printf(
        b,
        "e() {\n"
        "local x s= n=0 b=0 y h z=1\n"
        "if [ ! -s $1 ]; then f=p k=\"$k $1\"; return; fi\n"
        "while [ $z ]; do\n"
        "IFS= read -r -d '' -n $((%1$d + 1 - n)) x || z=\n"
        "n=$((n + ${#x})); [ $z ] && n=$((n + 1)) b=$((b + 1))\n"
        "[ $n -gt %1$d ] && break\n"
        "x=${x//%%/%%25}; x=${x//$'\\n'/%%0A}\n"
        "while [ $b -le %2$d ] && [[ $x == *[!\\ -~]* ]]; do\n"
        "y=${x%%%%[!\\ -~]*}; y=${x:${#y}:1}; printf -v h %%%%%%02X \"'$y\"; "
        "x=${x//\"$y\"/$h}; b=$((b + 1))\n"
        "done\n"
        "[ $b -gt %2$d ] && break\n"
        "s=$s$x; [ $z ] && s=$s%%00\n"
        "done <$1\n"
        "if [ $n -le %1$d ] && [ $b -le %2$d ]; then f=p$s k=\"$k $1\"\n"
        "elif command -v base64 >/dev/null && [ \"$(stat -c %%s $1)\" -le %3$d ]; "
        "then f=b$(base64 -w0 $1) k=\"$k $1\"\n"
        "else f=- m=\"$m $1\"; fi\n"
        "}\n",
        CL_REPORT_SHELL_MAX, CL_REPORT_SHELL_ODD, b64_max);
}

int cl_report_field_decode(const char *f, size_t n, cl_buf *out)
{
    if (n == 1 && f[0] == '-')
        return 1;
    if (n >= 1 && f[0] == 'b')
        return cl_base64_decode(f + 1, n - 1, out) == 0 ? 0 : -1;
    if (n < 1 || f[0] != 'p')
        return -1;
    for (size_t i = 1; i < n; i++) {
        unsigned char c = (unsigned char)f[i];
        if (c == '%') {
            if (i + 2 >= n || !isxdigit((unsigned char)f[i + 1])
                || !isxdigit((unsigned char)f[i + 2]))
                return -1;
            char h[3] = { f[i + 1], f[i + 2], 0 };
            c = (unsigned char)strtoul(h, NULL, 16);
            i += 2;
        } else if (c < 0x20 || c > 0x7e) {
            return -1;
        }
        if (cl_buf_append(out, &c, 1) < 0)
            return -1;
    }
    return 0;
}

int cl_report_parse(const char *rep, size_t len, const char *mark, cl_buf *out, cl_buf *err,
                    int *code)
{
    size_t ml = strlen(mark);
    if (!rep || len < ml || memcmp(rep, mark, ml) != 0)
        return 0;
    const char *end = rep + len, *a = rep + ml, *p = a;
    int c = 0;
    while (p < end && *p >= '0' && *p <= '9' && p - a < 3)
        c = c * 10 + (*p++ - '0');
    if (p == a || p >= end || *p != '\n' || c > 255)
        return -1;
    const char *l1 = p + 1;
    const char *l2 = memchr(l1, '\n', (size_t)(end - l1));
    const char *l3 = l2 ? memchr(l2 + 1, '\n', (size_t)(end - l2 - 1)) : NULL;
    if (!l3 || l3 + 1 != end || cl_report_field_decode(l1, (size_t)(l2 - l1), out) != 0
        || cl_report_field_decode(l2 + 1, (size_t)(l3 - l2 - 1), err) != 0)
        return -1;
    *code = c;
    return 1;
}
