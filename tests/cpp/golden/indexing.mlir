// aten::index_select
module @program attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%0: tensor<4x3xf32>, %1: tensor<2xi64>) -> (tensor<2x3xf32>) {
    %2 = "stablehlo.constant"() {value = dense<0> : tensor<i64>} : () -> tensor<i64>
    %3 = "stablehlo.broadcast_in_dim"(%2) {broadcast_dimensions = array<i64>} : (tensor<i64>) -> tensor<2xi64>
    %4 = "stablehlo.constant"() {value = dense<4> : tensor<i64>} : () -> tensor<i64>
    %5 = "stablehlo.broadcast_in_dim"(%4) {broadcast_dimensions = array<i64>} : (tensor<i64>) -> tensor<2xi64>
    %6 = "stablehlo.compare"(%1, %5) {comparison_direction = #stablehlo<comparison_direction GE>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi1>
    %7 = "stablehlo.compare"(%1, %3) {comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi1>
    %8 = "stablehlo.or"(%7, %6) : (tensor<2xi1>, tensor<2xi1>) -> tensor<2xi1>
    %9 = "stablehlo.constant"() {value = dense<false> : tensor<i1>} : () -> tensor<i1>
    %13 = "stablehlo.reduce"(%8, %9) ({
    ^bb0(%10: tensor<i1>, %11: tensor<i1>):
      %12 = "stablehlo.or"(%10, %11) : (tensor<i1>, tensor<i1>) -> tensor<i1>
      "stablehlo.return"(%12) : (tensor<i1>) -> ()
    }) {dimensions = array<i64: 0>} : (tensor<2xi1>, tensor<i1>) -> tensor<i1>
    %14 = "stablehlo.reshape"(%1) : (tensor<2xi64>) -> tensor<2x1xi64>
    %15 = "stablehlo.gather"(%0, %14) {dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, slice_sizes = array<i64: 1, 3>, indices_are_sorted = false} : (tensor<4x3xf32>, tensor<2x1xi64>) -> tensor<2x3xf32>
    "func.return"(%15) : (tensor<2x3xf32>) -> ()
  }
}
// aten::index.Tensor
module @program attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%0: tensor<4x3xf32>, %1: tensor<2xi64>) -> (tensor<2x3xf32>) {
    %2 = "stablehlo.constant"() {value = dense<-4> : tensor<i64>} : () -> tensor<i64>
    %3 = "stablehlo.broadcast_in_dim"(%2) {broadcast_dimensions = array<i64>} : (tensor<i64>) -> tensor<2xi64>
    %4 = "stablehlo.constant"() {value = dense<4> : tensor<i64>} : () -> tensor<i64>
    %5 = "stablehlo.broadcast_in_dim"(%4) {broadcast_dimensions = array<i64>} : (tensor<i64>) -> tensor<2xi64>
    %6 = "stablehlo.compare"(%1, %5) {comparison_direction = #stablehlo<comparison_direction GE>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi1>
    %7 = "stablehlo.compare"(%1, %3) {comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi1>
    %8 = "stablehlo.or"(%7, %6) : (tensor<2xi1>, tensor<2xi1>) -> tensor<2xi1>
    %9 = "stablehlo.constant"() {value = dense<false> : tensor<i1>} : () -> tensor<i1>
    %13 = "stablehlo.reduce"(%8, %9) ({
    ^bb0(%10: tensor<i1>, %11: tensor<i1>):
      %12 = "stablehlo.or"(%10, %11) : (tensor<i1>, tensor<i1>) -> tensor<i1>
      "stablehlo.return"(%12) : (tensor<i1>) -> ()
    }) {dimensions = array<i64: 0>} : (tensor<2xi1>, tensor<i1>) -> tensor<i1>
    %14 = "stablehlo.constant"() {value = dense<0> : tensor<i64>} : () -> tensor<i64>
    %15 = "stablehlo.broadcast_in_dim"(%14) {broadcast_dimensions = array<i64>} : (tensor<i64>) -> tensor<2xi64>
    %16 = "stablehlo.compare"(%1, %15) {comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type SIGNED>} : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi1>
    %17 = "stablehlo.constant"() {value = dense<4> : tensor<i64>} : () -> tensor<i64>
    %18 = "stablehlo.broadcast_in_dim"(%17) {broadcast_dimensions = array<i64>} : (tensor<i64>) -> tensor<2xi64>
    %19 = "stablehlo.add"(%1, %18) : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi64>
    %20 = "stablehlo.select"(%16, %19, %1) : (tensor<2xi1>, tensor<2xi64>, tensor<2xi64>) -> tensor<2xi64>
    %21 = "stablehlo.reshape"(%20) : (tensor<2xi64>) -> tensor<2x1xi64>
    %22 = "stablehlo.gather"(%0, %21) {dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, slice_sizes = array<i64: 1, 3>, indices_are_sorted = false} : (tensor<4x3xf32>, tensor<2x1xi64>) -> tensor<2x3xf32>
    "func.return"(%22) : (tensor<2x3xf32>) -> ()
  }
}
