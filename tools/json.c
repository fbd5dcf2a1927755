/* json.c: the tool's JSON writer (json.h). */
#include "json.h"

#include <math.h>
#include <string.h>

void json_init(json_writer *w, FILE *f)
{
    memset(w, 0, sizeof *w);
    w->f = f;
}

/* The length of the valid UTF-8 sequence at s (1 to 4), or 0 when s does not start one (overlong
 * forms, surrogates and code points past U+10FFFF are not valid). */
static int utf8_sequence_length(const unsigned char *s)
{
    unsigned c = s[0];
    int n;
    unsigned min, cp;
    if (c < 0x80)
        return 1;
    if ((c & 0xE0) == 0xC0) {
        n = 2, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        n = 3, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
        n = 4, cp = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    for (int i = 1; i < n; ++i) {
        if ((s[i] & 0xC0) != 0x80) /* also stops at the terminating 0 */
            return 0;
        cp = (cp << 6) | (s[i] & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

static void write_escaped(FILE *f, const char *text)
{
    const unsigned char *s = (const unsigned char *)text;
    fputc('"', f);
    while (*s) {
        unsigned c = *s;
        if (c == '"' || c == '\\') {
            fputc('\\', f);
            fputc((int)c, f);
            ++s;
        } else if (c < 0x20 || c == 0x7F) {
            switch (c) {
            case '\n': fputs("\\n", f); break;
            case '\r': fputs("\\r", f); break;
            case '\t': fputs("\\t", f); break;
            case '\b': fputs("\\b", f); break;
            case '\f': fputs("\\f", f); break;
            default: fprintf(f, "\\u%04x", c); break;
            }
            ++s;
        } else {
            int n = utf8_sequence_length(s);
            if (n == 0) {
                fputs("\\ufffd", f);
                ++s;
            } else {
                fwrite(s, 1, (size_t)n, f);
                s += n;
            }
        }
    }
    fputc('"', f);
}

/* The comma, indentation and "key": before a value at the current level. */
static void begin_value(json_writer *w, const char *key)
{
    if (w->depth > 0 && w->depth <= JSON_MAX_DEPTH) {
        if (w->count[w->depth - 1]++ > 0)
            fputc(',', w->f);
        fputc('\n', w->f);
        for (int i = 0; i < w->depth; ++i)
            fputs("  ", w->f);
    }
    if (key) {
        write_escaped(w->f, key);
        fputs(": ", w->f);
    }
}

static void open_level(json_writer *w, const char *key, char bracket)
{
    begin_value(w, key);
    fputc(bracket, w->f);
    if (w->depth < JSON_MAX_DEPTH)
        w->count[w->depth] = 0;
    ++w->depth;
}

static void close_level(json_writer *w, char bracket)
{
    --w->depth;
    if (w->depth < JSON_MAX_DEPTH && w->count[w->depth] > 0) {
        fputc('\n', w->f);
        for (int i = 0; i < w->depth; ++i)
            fputs("  ", w->f);
    }
    fputc(bracket, w->f);
}

void json_begin_object(json_writer *w, const char *key)
{
    open_level(w, key, '{');
}

void json_end_object(json_writer *w)
{
    close_level(w, '}');
}

void json_begin_array(json_writer *w, const char *key)
{
    open_level(w, key, '[');
}

void json_end_array(json_writer *w)
{
    close_level(w, ']');
}

void json_string(json_writer *w, const char *key, const char *value)
{
    begin_value(w, key);
    if (value)
        write_escaped(w->f, value);
    else
        fputs("null", w->f);
}

void json_int(json_writer *w, const char *key, int64_t value)
{
    begin_value(w, key);
    fprintf(w->f, "%lld", (long long)value);
}

void json_uint(json_writer *w, const char *key, uint64_t value)
{
    begin_value(w, key);
    fprintf(w->f, "%llu", (unsigned long long)value);
}

void json_double(json_writer *w, const char *key, double value)
{
    begin_value(w, key);
    if (isfinite(value))
        fprintf(w->f, "%.17g", value);
    else
        fputs("null", w->f);
}

void json_bool(json_writer *w, const char *key, int value)
{
    begin_value(w, key);
    fputs(value ? "true" : "false", w->f);
}

void json_null(json_writer *w, const char *key)
{
    begin_value(w, key);
    fputs("null", w->f);
}

void json_finish(json_writer *w)
{
    fputc('\n', w->f);
}
