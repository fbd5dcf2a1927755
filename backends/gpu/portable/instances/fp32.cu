#define FA_PORTABLE_STORE store_f32
#include "instance.inc"
