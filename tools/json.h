/* json.h: a small streaming JSON writer for the tool's --json output (tools/json.c). Members are
 * written in the order of the calls; the writer keeps the commas and the nesting. Strings are
 * escaped as RFC 8259 asks (quote, backslash, control characters) and bytes that are not UTF-8
 * become U+FFFD, so any C string (a device name, a path) gives valid JSON. Numbers that are not
 * finite are written as null. */
#ifndef FA_TOOL_JSON_H
#define FA_TOOL_JSON_H

#include <stdint.h>
#include <stdio.h>

#define JSON_MAX_DEPTH 16

typedef struct json_writer {
    FILE *f;
    int depth;
    int count[JSON_MAX_DEPTH]; /* members or elements written so far at each level */
} json_writer;

void json_init(json_writer *w, FILE *f);
/* key is the member's name inside an object, NULL inside an array or at the top. */
void json_begin_object(json_writer *w, const char *key);
void json_end_object(json_writer *w);
void json_begin_array(json_writer *w, const char *key);
void json_end_array(json_writer *w);
void json_string(json_writer *w, const char *key, const char *value); /* NULL: null */
void json_int(json_writer *w, const char *key, int64_t value);
void json_uint(json_writer *w, const char *key, uint64_t value);
void json_double(json_writer *w, const char *key, double value);
void json_bool(json_writer *w, const char *key, int value);
void json_null(json_writer *w, const char *key);
/* Ends the document with a newline. */
void json_finish(json_writer *w);

#endif
