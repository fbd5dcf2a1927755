/* rtc_loaded.c: the table of loaded kernels (rtc_loaded.h): a growing array under one lock; a
 * process loads some dozens of kernels, so a linear search is enough. Plain C. */
#include "host/rtc_loaded.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct loaded_kernel {
    const void *where;
    char name[FA_RTC_NAME_MAX]; /* the name expression (namespaced: unique across families) */
    void *module;
    void *function;
    unsigned shared_limit;
} loaded_kernel;

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static loaded_kernel *table;
static size_t table_len, table_cap;

/* the table's entry for (where, name), or NULL; table_lock held */
static loaded_kernel *find_locked(const void *where, const char *name)
{
    for (size_t i = 0; i < table_len; ++i)
        if (table[i].where == where && strcmp(table[i].name, name) == 0)
            return &table[i];
    return NULL;
}

void *fa_rtc_loaded_find(const void *where, const char *name, unsigned *shared_limit)
{
    pthread_mutex_lock(&table_lock);
    const loaded_kernel *e = find_locked(where, name);
    void *function = e ? e->function : NULL;
    if (shared_limit)
        *shared_limit = e ? e->shared_limit : 0;
    pthread_mutex_unlock(&table_lock);
    return function;
}

fa_rtc_status fa_rtc_loaded_add(const void *where, const char *name, void **module, void **function)
{
    fa_rtc_status st = FA_RTC_OK;
    pthread_mutex_lock(&table_lock);
    const loaded_kernel *loaded = find_locked(where, name);
    if (loaded) { /* another thread loaded it meanwhile: its module is kept */
        *function = loaded->function;
    } else {
        if (table_len == table_cap) {
            size_t cap = table_cap ? 2 * table_cap : 32;
            loaded_kernel *grown = realloc(table, cap * sizeof *grown);
            if (!grown) {
                st = FA_RTC_OUT_OF_MEMORY;
            } else {
                table = grown;
                table_cap = cap;
            }
        }
        if (st == FA_RTC_OK) {
            loaded_kernel *e = &table[table_len++];
            e->where = where;
            snprintf(e->name, sizeof e->name, "%s", name);
            e->module = *module;
            e->function = *function;
            e->shared_limit = 0;
            *module = NULL;
        }
    }
    pthread_mutex_unlock(&table_lock);
    return st;
}

void fa_rtc_loaded_raise(const void *where, const char *name, unsigned bytes)
{
    pthread_mutex_lock(&table_lock);
    loaded_kernel *e = find_locked(where, name);
    if (e && e->shared_limit < bytes)
        e->shared_limit = bytes;
    pthread_mutex_unlock(&table_lock);
}

void fa_rtc_loaded_release(void (*unload)(const void *where, void *module, void *user), void *user)
{
    pthread_mutex_lock(&table_lock);
    for (size_t i = 0; i < table_len; ++i)
        unload(table[i].where, table[i].module, user);
    free(table);
    table = NULL;
    table_len = table_cap = 0;
    pthread_mutex_unlock(&table_lock);
}
